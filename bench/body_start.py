"""What starting a no-op `async def` body costs: a task each (the Worker's way before
runtime/inline.py), against running a batch's bodies inline in one task (its way since), each
in a `contextvars` context of its own with a done future for its outcome
(results/pickup-calls-2026-12-04.md).

    python bench/body_start.py        # process time a body, each way twice, alternating

It also times what the inline start costs a body that does suspend: such a body keeps a task
of its own, and each of its suspensions passes through `runtime.inline.drive`, against a task
that runs the body itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import time
from typing import Any

from durajobs.runtime.inline import drive
from durajobs.runtime.loop import run as run_loop
from durajobs.runtime.worker import GC_YOUNG_THRESHOLD

BATCH = 500
ROUNDS = 400
WARM_UP = 20
SUSPENSIONS = 10  # of a body that suspends: a future each, resolved on the next loop turn


async def _body() -> None:
    return None


def _ended(_future: asyncio.Future[Any]) -> None:
    return None


async def _a_task_each(loop: asyncio.AbstractEventLoop) -> None:
    for _ in range(BATCH):
        loop.create_task(_body()).add_done_callback(_ended)
    # the tasks run, then their done callbacks
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def _inline(loop: asyncio.AbstractEventLoop) -> None:
    for _ in range(BATCH):
        body = _body()
        outcome = loop.create_future()
        try:
            contextvars.copy_context().run(body.send, None)
        except StopIteration as returned:
            outcome.set_result(returned.value)
        else:
            raise RuntimeError("a no-op body suspended")
        _ended(outcome)


async def _inline_in_one_task(loop: asyncio.AbstractEventLoop) -> None:
    await loop.create_task(_inline(loop))


async def _suspending_body() -> None:
    loop = asyncio.get_running_loop()
    for _ in range(SUSPENSIONS):
        waited = loop.create_future()
        loop.call_soon(waited.set_result, None)
        await waited


async def _driven(body: Any) -> Any:
    """The runner's way with a body that suspends: its first step inline, then `drive`."""
    context = contextvars.copy_context()
    try:
        yielded = context.run(body.send, None)
    except StopIteration as returned:
        return returned.value
    return await drive(body, context, yielded)


async def _suspending_tasks(loop: asyncio.AbstractEventLoop) -> None:
    await asyncio.gather(*(loop.create_task(_suspending_body()) for _ in range(BATCH)))


async def _suspending_driven(loop: asyncio.AbstractEventLoop) -> None:
    await asyncio.gather(*(loop.create_task(_driven(_suspending_body())) for _ in range(BATCH)))


WAYS = {
    "a task each": _a_task_each,
    "inline in one task": _inline_in_one_task,
    f"suspending {SUSPENSIONS} times, in a task": _suspending_tasks,
    f"suspending {SUSPENSIONS} times, driven inline": _suspending_driven,
}


async def _per_body(way: str) -> float:
    loop = asyncio.get_running_loop()
    start = WAYS[way]
    for _ in range(WARM_UP):
        await start(loop)
    began = time.process_time()
    for _ in range(ROUNDS):
        await start(loop)
    return (time.process_time() - began) / (ROUNDS * BATCH) * 1e6


def main() -> None:
    # the collector as a Worker(freeze_gc=True) sets it: without, the full collections over
    # the imported modules' objects double the cost of a task
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    for way in list(WAYS) * 2:
        print(f"{way}: {run_loop(_per_body(way)):.2f} us a body")


if __name__ == "__main__":
    main()
