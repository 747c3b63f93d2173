"""A stand-in for a library call that drops a cancel, as Python 3.11's `asyncio.wait_for` does
when the cancel lands in the loop turn that brings its result (psycopg_pool waits for a pooled
connection with it)."""

from __future__ import annotations

import asyncio


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


async def ended_within(task: asyncio.Future[None], seconds: float) -> bool:
    """Answer whether `task` ended within `seconds`; one that did not is cancelled until it does."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
    return bool(done)
