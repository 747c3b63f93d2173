"""Stopping a background task for certain.

One cancel is not always enough on Python 3.11: `asyncio.wait_for`, which psycopg_pool uses
while a caller waits for a pooled connection, drops a cancel that lands in the same loop turn as
its result, and the task runs on as if never asked to stop.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_SECONDS = 0.1


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, cancelling again while it runs on."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: a stop is not the place to report it


class CancelWatch:
    """Notices a cancel that a library dropped, for a loop that runs until its task is cancelled.

    asyncio counts every cancel asked of a task (`Task.cancelling()`), and the count stays up when
    a `wait_for` underneath drops the CancelledError it caused. A loop that calls `check()` each
    turn stops as it was asked instead of running on until the next cancel.
    """

    def __init__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("CancelWatch needs a running task")
        self._task = task
        # cancels asked before the loop began are the caller's business, delivered or not
        self._baseline = task.cancelling()

    def check(self) -> None:
        if self._task.cancelling() > self._baseline:
            raise asyncio.CancelledError
