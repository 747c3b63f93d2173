"""Running a coroutine inside the task that is already running, as that task's own step would.

A busy worker's bodies mostly return without ever suspending, and a task each cost about
1.6-2.6 us of the worker's CPU a body (bench/body_start.py), a sixth or more of the Python a job
costs. The runner instead takes a claimed batch's bodies one after another in one task, each up
to its first suspension and in a context of its own (a copy, as a task would make). The first
body that suspends keeps the task it began in, so `current_task()` is the same from its first
line to its last (`asyncio.timeout`, a task group and a cancel scope hold), and `drive` runs it
on from there. The rest of the batch goes on in a new task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextvars import Context
from typing import Any


async def drive(body: Coroutine[Any, Any, Any], context: Context, yielded: Any) -> Any:
    """Run `body`, suspended on `yielded` after its first step in `context`, to its end in the
    current task, and answer what it returned.

    Each turn waits on what the body handed up the way a task's step does: a future is
    awaited (its result read by the body itself, its error or a cancel of this task thrown in),
    a bare yield gives the loop one turn, and anything else is thrown back as a bad yield."""
    send, throw = body.send, body.throw
    while True:
        thrown: BaseException | None = None
        try:
            if getattr(yielded, "_asyncio_future_blocking", None):
                # the body's await marked the future as waited on; the task's step clears the
                # mark before it waits, and so must this await, or the future refuses it
                yielded._asyncio_future_blocking = False
                await yielded
            elif yielded is None:
                await asyncio.sleep(0)
            else:
                raise RuntimeError(f"a job body yielded {yielded!r}, which is not a future")
        except BaseException as raised:  # handed to the body, as a task's step would
            thrown = raised
        yielded = None
        try:
            yielded = context.run(send, None) if thrown is None else context.run(throw, thrown)
        except StopIteration as returned:
            return returned.value
        finally:
            thrown = None
