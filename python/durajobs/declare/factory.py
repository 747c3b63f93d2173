"""What the job factories (export, backfill, webhook) share: the part of a job's context their
bodies use, and calling an application's function without blocking the worker's event loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar
from uuid import UUID

from pydantic import BaseModel

from durajobs._db import calls
from durajobs.errors import DurajobsError

T = TypeVar("T")
I_co = TypeVar("I_co", bound=BaseModel, covariant=True)


class Steps(Protocol):
    async def run(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Any: ...


class Signal(Protocol):
    """The attempt's cancel signal (runtime.cancel.CancelSignal), as a factory reads it."""

    @property
    def reason(self) -> DurajobsError | None: ...

    @property
    def is_set(self) -> bool: ...


class Context(Protocol[I_co]):
    """What a factory's body uses of its JobContext (runtime.attempt)."""

    @property
    def input(self) -> I_co: ...

    @property
    def step(self) -> Steps: ...

    @property
    def job(self) -> str: ...

    @property
    def job_id(self) -> UUID: ...

    @property
    def run_id(self) -> UUID: ...

    @property
    def attempt(self) -> int: ...

    @property
    def tenant_id(self) -> str | None: ...

    @property
    def signal(self) -> Any: ...

    async def _call_database(self, call: calls.Call[T]) -> T: ...


async def call_off_loop(function: Callable[..., Any], *arguments: Any) -> Any:
    """Call an application's `function` off the event loop unless it is async: a blocking read
    or write must not stall the worker's other attempts."""
    if inspect.iscoroutinefunction(function):
        return await function(*arguments)
    answer = await thread_outliving_cancel(function, *arguments)
    if inspect.isawaitable(answer):
        return await answer
    return answer


async def outliving_cancel(
    work: Awaitable[Any], on_finished: Callable[[Any], Awaitable[None]] | None = None
) -> Any:
    """Await `work`; when the awaiting task is cancelled, wait for `work` to end before letting
    the cancel through, and hand what it answered to `on_finished` first."""
    future = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        if not future.cancelled():
            failure = future.exception()  # retrieved: the cancel is what this attempt reports
            if failure is None and on_finished is not None:
                await on_finished(future.result())
        raise


async def thread_outliving_cancel(
    fn: Callable[..., Any],
    *arguments: Any,
    on_finished: Callable[[Any], Awaitable[None]] | None = None,
) -> Any:
    """Run `fn` in a thread; when the awaiting task is cancelled, wait for the thread before
    letting the cancel through, and hand what it returned to `on_finished` first (a durable
    step keeps it, so the next attempt does not run it again).

    A thread cannot be stopped: answering a drain's cancel at once handed the run back while
    this copy still ran, so another worker could run the same step (or page) beside it. The
    wait holds the attempt instead, as a plain def body does; the drain deadline bounds it.
    (After a timeout or a lost lease the attempt ends after its short grace either way.)
    """
    return await outliving_cancel(asyncio.to_thread(fn, *arguments), on_finished)
