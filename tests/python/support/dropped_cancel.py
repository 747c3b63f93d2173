"""A stand-in for a library call that drops a cancel, as Python 3.11's `asyncio.wait_for` does
when the cancel lands in the loop turn that brings its result (psycopg_pool waits for a pooled
connection with it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class CancelDropper:
    """Awaitable once: parks until cancelled, then returns as if nothing had been asked."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.dropped = False

    async def park(self) -> None:
        if self.dropped:
            return
        self.entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.dropped = True  # no uncancel(): the task's count of asked cancels stays up

    def ahead_of(self, method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        """Wrap `method` so its first call parks here first."""

        async def parked_first(*arguments: Any, **keywords: Any) -> T:
            await self.park()
            return await method(*arguments, **keywords)

        return parked_first


def cancel_once_while_parked(
    run: Callable[[], Coroutine[Any, Any, None]], dropper: CancelDropper
) -> tuple[bool, bool]:
    """Start `run()` as a task, cancel it once while it is parked in `dropper`, and answer whether
    it ended within 3 s, and whether it ended cancelled."""

    async def scenario() -> tuple[bool, bool]:
        task = asyncio.ensure_future(run())
        async with asyncio.timeout(10):
            await dropper.entered.wait()
        task.cancel()
        ended = await ended_within(task, 3)
        return ended, task.cancelled()

    return asyncio.run(scenario())


async def ended_within(task: asyncio.Future[None], seconds: float) -> bool:
    """Answer whether `task` ended within `seconds`; one that did not is cancelled until it does."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
    return bool(done)
