"""Background tasks: starting a worker's long-lived parts under supervision, and stopping a
task for certain.

A part (the lease renewal, the presence beat, the wake, the upkeep) runs as a task of the
worker's TaskGroup once the worker runs: a part that fails drains the worker and makes its run()
raise, instead of leaving it claiming with, say, no lease renewed. Outside a running worker a
part runs as a loose task.

One cancel is not always enough on Python 3.11: `asyncio.wait_for`, which psycopg_pool uses
while a caller waits for a pooled connection, drops a cancel that lands in the same loop turn as
its result, and the task runs on as if never asked to stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

RECANCEL_SECONDS = 0.1

# how a part starts its task: by its name, for the log of a failure
Spawn = Callable[[str, Coroutine[Any, Any, None]], "asyncio.Task[None]"]


def spawn_loose(part: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A part's task outside a running worker: nobody is stopped when it fails."""
    return asyncio.get_running_loop().create_task(work, name=part)


class Supervisor:
    """Starts parts as tasks of one TaskGroup, so none outlives the worker's run(). The first
    part that fails is kept and `on_failure` is called (the worker drains, as on SIGTERM); the
    group is not aborted, which would cancel every other part at once, the lease renewal among
    them, while the drain still waits for held attempts. run() raises the kept error once its
    teardown is done."""

    def __init__(
        self, group: asyncio.TaskGroup, worker_id: str, on_failure: Callable[[], None]
    ) -> None:
        self._group = group
        self._worker_id = worker_id
        self._on_failure = on_failure
        self.failure: Exception | None = None

    def spawn(self, part: str, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        watched = self._watched(part, work)
        try:
            return self._group.create_task(watched, name=part)
        except RuntimeError:
            # the group is already closing (the worker is stopping): the teardown stops this
            # part with the others
            watched.close()
            return spawn_loose(part, work)

    async def _watched(self, part: str, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception as failure:
            log.error(
                "jobs.worker.part-failed",
                extra={"worker": self._worker_id, "part": part, "error": repr(failure)},
            )
            if self.failure is None:
                self.failure = failure
                self._on_failure()


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
