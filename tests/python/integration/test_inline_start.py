"""The worker starts a claimed batch's `async def` bodies one after another in one task. Each
body must still behave as if it had a task of its own: a context of its own, one task from its
first line to its last, a cancel or a signal that reaches it alone, and a batch whose other
bodies run on whatever one of them does."""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any
from uuid import UUID

import durajobs
from durajobs.errors import Draining
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import Numbered
from support.running import run_until

BATCH = 12
LABEL: contextvars.ContextVar[int | None] = contextvars.ContextVar("label", default=None)


def _by_n(item: Numbered) -> str:
    return str(item.n)


def _enqueue(database_url: str, name: str, count: int = BATCH) -> None:
    with durajobs.Client.connect(database_url) as client:
        client.enqueue_many(
            [{"name": name, "input": {"n": n}, "idempotency_key": str(n)} for n in range(count)]
        )


def _run(worker: Worker, done: Any) -> None:
    asyncio.run(run_until(worker, done))


def test_each_body_of_a_batch_runs_in_a_context_of_its_own(database_url):
    registry = durajobs.Registry(database_url=database_url)
    seen: list[int | None] = []

    @declare(registry, "label", input=Numbered, idempotency_key=_by_n)
    async def label(ctx: durajobs.JobContext[Numbered]) -> None:
        seen.append(LABEL.get())  # what an earlier body of the batch set must not show here
        LABEL.set(ctx.input.n)

    _enqueue(database_url, "label")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: worker.stats().completed >= BATCH)
    assert seen == [None] * BATCH


def test_a_body_that_suspends_keeps_one_task_of_its_own_to_its_end(database_url):
    registry = durajobs.Registry(database_url=database_url)
    tasks: dict[int, tuple[asyncio.Task[Any] | None, asyncio.Task[Any] | None]] = {}

    @declare(registry, "suspends", input=Numbered, idempotency_key=_by_n)
    async def suspends(ctx: durajobs.JobContext[Numbered]) -> None:
        before = asyncio.current_task()
        await asyncio.sleep(0.01)
        tasks[ctx.input.n] = (before, asyncio.current_task())

    _enqueue(database_url, "suspends")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: worker.stats().completed >= BATCH)
    assert sorted(tasks) == list(range(BATCH))
    assert all(before is after for before, after in tasks.values())
    # suspended side by side: no two bodies shared a task
    assert len({id(before) for before, _ in tasks.values()}) == BATCH
    assert worker.stats().outcomes == {"completed": BATCH}


def test_a_cancel_a_body_leaves_on_the_shared_task_reaches_none_of_the_rest(database_url):
    """The first body cancels the task it runs in, then returns: the rest of its batch, which
    began in that task, must run to their ends uncancelled."""
    registry = durajobs.Registry(database_url=database_url)
    cancelled_one: list[int] = []
    finished: list[int] = []

    @declare(registry, "shared", input=Numbered, idempotency_key=_by_n)
    async def shared(ctx: durajobs.JobContext[Numbered]) -> None:
        if not cancelled_one:
            cancelled_one.append(ctx.input.n)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            return
        await asyncio.sleep(0.01)  # where a cancel left on the task would land
        finished.append(ctx.input.n)

    _enqueue(database_url, "shared")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: worker.stats().completed >= BATCH)
    assert worker.stats().outcomes == {"completed": BATCH}
    assert sorted(finished + cancelled_one) == list(range(BATCH))


def test_a_signal_set_before_a_body_began_keeps_it_from_running(database_url):
    """The first body of the batch sets the signal of every other attempt of its batch (as a
    drain would) before any of them began: none of their bodies runs on that claim; each is
    handed back uncounted and runs once, later."""
    registry = durajobs.Registry(database_url=database_url)
    runs: list[int] = []
    interrupted: list[UUID] = []

    @declare(registry, "early", input=Numbered, idempotency_key=_by_n)
    async def early(ctx: durajobs.JobContext[Numbered]) -> None:
        if not interrupted:
            for held in list(worker._runner.running):
                if held.claimed.id != ctx.job_id:
                    held.signal.cancel(Draining("the test drains it", detail={}))
                    interrupted.append(held.claimed.id)
            await asyncio.sleep(0)  # the rest of the batch goes on in another task
        runs.append(ctx.input.n)

    _enqueue(database_url, "early")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: worker.stats().completed >= BATCH)
    assert len(interrupted) == BATCH - 1
    assert sorted(runs) == list(range(BATCH))  # each body ran exactly once
    assert worker.stats().outcomes == {"completed": BATCH, "interrupted": BATCH - 1}


def test_a_deadline_stops_only_the_body_that_overran_its_batch_runs_on(database_url):
    registry = durajobs.Registry(database_url=database_url)
    finished: list[int] = []

    @declare(
        registry,
        "deadline",
        input=Numbered,
        idempotency_key=_by_n,
        timeout="200ms",
    )
    async def deadline(ctx: durajobs.JobContext[Numbered]) -> None:
        if ctx.input.n == 0:
            await asyncio.sleep(30)  # the first of the batch keeps the shared task, then overruns
        elif ctx.input.n % 2:
            await asyncio.sleep(0.01)
        finished.append(ctx.input.n)

    _enqueue(database_url, "deadline")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: sum(worker.stats().outcomes.values()) >= BATCH)
    assert sorted(finished) == list(range(1, BATCH))
    assert worker.stats().outcomes == {"completed": BATCH - 1, "retried": 1}


def test_a_body_that_raises_before_suspending_fails_alone(database_url):
    registry = durajobs.Registry(database_url=database_url)
    finished: list[int] = []

    @declare(
        registry,
        "raises",
        input=Numbered,
        idempotency_key=_by_n,
    )
    async def raises(ctx: durajobs.JobContext[Numbered]) -> None:
        if ctx.input.n % 3 == 0:
            raise ValueError(f"job {ctx.input.n} refuses")
        finished.append(ctx.input.n)

    _enqueue(database_url, "raises")
    worker = Worker(registry, database_url, concurrency=BATCH)
    _run(worker, lambda: sum(worker.stats().outcomes.values()) >= BATCH)
    failing = [n for n in range(BATCH) if n % 3 == 0]
    assert sorted(finished) == [n for n in range(BATCH) if n % 3]
    assert worker.stats().outcomes == {
        "completed": BATCH - len(failing),
        "retried": len(failing),
    }


def test_a_job_whose_bodies_suspend_starts_in_a_task_each_once_one_did(database_url):
    """Started inline, a batch of suspending bodies would start one a loop turn (each hands
    the rest on to a new task): once a job's body has suspended, its bodies start in a task
    each. A job whose bodies never suspend stays inline."""
    registry = durajobs.Registry(database_url=database_url)
    own_task: dict[str, list[bool]] = {"io": [], "quick": []}

    def in_own_task(frame_code: Any) -> bool:
        task = asyncio.current_task()
        assert task is not None
        return task.get_coro().cr_code is frame_code  # type: ignore[union-attr]

    @declare(registry, "io", input=Numbered, idempotency_key=_by_n)
    async def io(ctx: durajobs.JobContext[Numbered]) -> None:
        own_task["io"].append(in_own_task(sys._getframe().f_code))
        await asyncio.sleep(0.001)

    @declare(registry, "quick", input=Numbered, idempotency_key=_by_n)
    async def quick(ctx: durajobs.JobContext[Numbered]) -> None:
        own_task["quick"].append(in_own_task(sys._getframe().f_code))

    worker = Worker(registry, database_url, concurrency=BATCH)

    async def scenario() -> None:
        running = asyncio.ensure_future(worker.run())
        try:
            for phase in (1, 2):
                await asyncio.to_thread(_enqueue_from, database_url, "io", (phase - 1) * BATCH)
                await asyncio.to_thread(_enqueue_from, database_url, "quick", (phase - 1) * BATCH)
                await _until_completed(worker, 2 * BATCH * phase, running)
        finally:
            worker.stop()
            await asyncio.wait_for(running, 30)

    asyncio.run(scenario())
    first, later = own_task["io"][:BATCH], own_task["io"][BATCH:]
    assert len(later) == BATCH
    assert not first[0]  # the first body began in the batch's shared task
    assert all(later)  # the second phase: a task each
    assert not any(own_task["quick"])  # never suspended: always inline


def _enqueue_from(database_url: str, name: str, start: int) -> None:
    with durajobs.Client.connect(database_url) as client:
        client.enqueue_many(
            [
                {"name": name, "input": {"n": n}, "idempotency_key": str(n)}
                for n in range(start, start + BATCH)
            ]
        )


async def _until_completed(worker: Worker, count: int, running: asyncio.Future[None]) -> None:
    async with asyncio.timeout(20):
        while worker.stats().completed < count:
            assert not running.done(), running.exception() if running.done() else None
            await asyncio.sleep(0.02)
