"""Durable steps: a step's result is stored before the run goes on, and replayed from storage.

`step.run(name, fn)` runs `fn` once ever per run; `step.sleep(...)` parks the run until a wake
time without holding a process. Async handlers get `AsyncSteps`; plain `def` handlers, which run
in a thread, get `SyncSteps`, whose writes cross to the worker's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload
from uuid import UUID

from pydantic import BaseModel

from durajobs._values.durations import Duration, parse_duration
from durajobs._values.records import (
    ChildWait,
    EnqueueResult,
    EventLookup,
    JobOutcome,
    StepRecord,
)
from durajobs._values.states import JobState, StepStatus
from durajobs._values.storable import json_text
from durajobs.declare.enqueue import EnqueueRequest
from durajobs.declare.factory import outliving_cancel, thread_outliving_cancel
from durajobs.declare.handle import JobHandle, ResultReader, failure_of
from durajobs.declare.registry import DEFAULT_EVENT_POLL
from durajobs.errors import (
    Aborted,
    ArgumentInvalid,
    Draining,
    JobFailed,
    JobNotFound,
    JobTimeout,
    StepDuplicate,
    StepOutputInvalid,
)
from durajobs.runtime.cancel import CancelSignal

if TYPE_CHECKING:
    from durajobs.declare.registry import Job

log = logging.getLogger(__name__)


T = TypeVar("T")
I = TypeVar("I", bound=BaseModel)  # noqa: E741 - a child job's input model

# how often a run waiting for its children looks again when no child's settle wakes it
DEFAULT_CHILD_POLL = timedelta(minutes=5)


class StepSuspension(BaseException):
    """Raised by step.sleep and step.wait_for_event to park the run; a BaseException so that
    `except Exception` lets it by. `delay` is how long the run parks, measured on the clock that
    set it (the database's, for a wait), so no process's skew changes it."""

    def __init__(
        self,
        delay: timedelta,
        step: str,
        wake_at: datetime | None = None,
        *,
        parked: bool = False,
    ) -> None:
        super().__init__(f"run suspended by step {step!r} for {delay}")
        self.delay = max(delay, timedelta(0))
        self.step = step
        self.wake_at = wake_at  # a sleep's recorded wake time, when there is one
        # the database already parked the run (a wait for children): nothing is to be settled
        self.parked = parked


class StepWriter(Protocol):
    """Stores a step's outcome for the attempt, fenced on its claim, and reads the event bus."""

    async def record_step(
        self,
        name: str,
        status: StepStatus,
        *,
        output: Any = None,
        wake_at: datetime | None = None,
        through_drain: bool = False,
    ) -> StepRecord:
        """Store a step; refused once the attempt's signal is set, but for a drain when
        `through_drain` (the claim is still held: a step that ran to its end is kept)."""
        ...

    async def find_event(self, event: str, match: str | None, after: datetime) -> EventLookup: ...

    async def enqueue_children(
        self, name: str, requests: Sequence[EnqueueRequest]
    ) -> list[EnqueueResult]:
        """Enqueue `requests` as children of the attempt's job and record step `name` with
        their ids, in one transaction."""
        ...

    async def wait_children(self, name: str, ids: Sequence[UUID], poll: timedelta) -> ChildWait:
        """The children's outcomes once all settled, else park the run (see ChildWait)."""
        ...


@dataclass
class _Replay:
    output: Any


class StepBook:
    """What both step APIs share: the stored records, the names used, the write fence."""

    def __init__(
        self,
        records: dict[str, StepRecord],
        writer: StepWriter,
        signal: CancelSignal,
        step_timeout: timedelta | None,
        event_poll: timedelta = DEFAULT_EVENT_POLL,
    ) -> None:
        self.event_poll = event_poll
        self.records = records
        self.writer = writer
        self.signal = signal
        self.step_timeout = step_timeout
        self.used: set[str] = set()
        self.ran: list[str] = []
        self.replayed: list[str] = []
        self._sleeps = 0
        self._enqueues = 0

    def begin(self, name: str) -> _Replay | None:
        if not isinstance(name, str) or not name:
            raise ArgumentInvalid("a step needs a non-empty name", detail={"step": name})
        if name in self.used:
            raise StepDuplicate(
                f"step {name!r} is used twice in one run; each step needs its own name",
                detail={"step": name},
            )
        self.used.add(name)
        stored = self.records.get(name)
        if stored is not None and stored.status is StepStatus.COMPLETED:
            self.replayed.append(name)
            return _Replay(stored.output)
        return None

    def draining(self) -> bool:
        """Whether the attempt is stopped by a drain alone: its claim is held, so what a step
        finished can still be stored, and the next attempt replays it instead of running it."""
        return isinstance(self.signal.reason, Draining)

    async def keep(self, name: str, output: Any) -> None:
        """Store the output of a step that ran to its end while the attempt drained; the
        drain still ends the attempt. A step that cannot be stored now runs again (as before)."""
        try:
            stored = self.stored_form(name, output)
            await self.writer.record_step(
                name, StepStatus.COMPLETED, output=stored, through_drain=True
            )
        except Exception as failure:
            log.warning(
                "jobs.step.not-kept", extra={"step": name, "error": f"{type(failure).__name__}"}
            )
        else:
            self.ran.append(name)

    def stored_form(self, name: str, output: Any) -> Any:
        """Answer `output` as a replay will read it back (a tuple becomes a list), or raise
        X_STEP_OUTPUT_INVALID: the first run and every replay see the same value."""
        try:
            # what jsonb refuses (a NUL, a lone surrogate) would fail the step's write as a
            # retryable error, and every attempt would run the step again
            return json.loads(json_text(output))
        except (TypeError, ValueError) as invalid:
            raise StepOutputInvalid(
                f"step {name!r} returned {type(output).__name__}, which is not JSON: {invalid}",
                detail={"step": name, "type": type(output).__name__},
            ) from None

    def sleep_name(
        self, name_or_duration: str | Duration, duration: Duration | None
    ) -> tuple[str, timedelta]:
        if duration is None:
            # the name derives from the duration and the order of sleeps in the run
            self._sleeps += 1
            return f"sleep:{name_or_duration}#{self._sleeps}", parse_duration(
                name_or_duration, field="step.sleep duration"
            )
        return str(name_or_duration), parse_duration(duration, field="step.sleep duration")

    def enqueue_name(self, job: Job[Any], name: str | None) -> str:
        if name is not None:
            return name
        # derived from the job and the order of enqueues in the run, as a sleep's name is
        self._enqueues += 1
        return f"enqueue:{job.name}#{self._enqueues}"

    def step_signal(self) -> tuple[CancelSignal, threading.Timer | None]:
        """A signal for one step: set when the run's is, or when step_timeout passes."""
        signal = CancelSignal()
        self.signal.on_cancel(signal.cancel)
        timer = None
        if self.step_timeout is not None:
            limit = self.step_timeout
            timer = threading.Timer(
                limit.total_seconds(),
                lambda: signal.cancel(JobTimeout(f"a step ran past its step_timeout of {limit}")),
            )
            timer.daemon = True
            timer.start()
        return signal, timer

    def timed_out(self, name: str, signal: CancelSignal) -> JobTimeout | None:
        if isinstance(signal.reason, JobTimeout) and not self.signal.is_set:
            return JobTimeout(
                f"step {name!r} ran past its step_timeout of {self.step_timeout}",
                detail={"step": name},
            )
        return None


def _takes_signal(fn: Callable[..., Any]) -> bool:
    """True when `fn` has a required positional parameter: the step's CancelSignal goes there.

    `lambda item=item: ...` (a captured loop variable) has none and is called with nothing.
    """
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        for p in parameters
    )


class AsyncSteps:
    """Steps for `async def` handlers."""

    def __init__(self, book: StepBook) -> None:
        self._book = book

    @overload
    async def run(self, name: str, fn: Callable[..., Awaitable[T]]) -> T: ...

    @overload
    async def run(self, name: str, fn: Callable[..., T]) -> T: ...

    async def run(self, name: str, fn: Callable[..., Any]) -> Any:
        """Run `fn` once ever for this run and store its result; replay it on later attempts.

        `fn` may be sync or async and may take one argument, the step's CancelSignal.
        Raises X_STEP_DUPLICATE, X_STEP_OUTPUT_INVALID, X_JOB_TIMEOUT, X_ABORTED.
        """
        replay = self._book.begin(name)
        if replay is not None:
            return replay.output
        self._book.signal.raise_if_set()
        signal, timer = self._book.step_signal()
        try:
            arguments = (signal,) if _takes_signal(fn) else ()
            if inspect.iscoroutinefunction(fn):
                try:
                    output = await _until_cancelled(fn(*arguments), signal)
                except Aborted:
                    # the step's own ceiling cancelled it: that is a timeout naming the step
                    raise self._book.timed_out(name, signal) or _aborted(signal) from None
            else:
                # a thread cannot be stopped: one a drain's cancel waited for ran its step to the
                # end, which is kept rather than run again by the next attempt
                output = await thread_outliving_cancel(
                    fn, *arguments, on_finished=partial(self._keep_if_draining, name)
                )
                if inspect.isawaitable(output):
                    # `lambda: fetch()` hands back the coroutine of an async function
                    try:
                        output = await _until_cancelled(output, signal)
                    except Aborted:
                        raise self._book.timed_out(name, signal) or _aborted(signal) from None
                if signal.is_set and not self._book.draining():
                    raise self._book.timed_out(name, signal) or _aborted(self._book.signal)
        finally:
            if timer is not None:
                timer.cancel()
        timeout = self._book.timed_out(name, signal)
        if timeout is not None:
            raise timeout
        if self._book.draining():
            # to its end despite the drain's cancel: a record half sent runs the step again
            await outliving_cancel(self._book.keep(name, output))
        output = self._book.stored_form(name, output)
        self._book.signal.raise_if_set()
        record = await self._book.writer.record_step(name, StepStatus.COMPLETED, output=output)
        self._book.ran.append(name)
        # as the database holds it, which is what every replay answers (jsonb orders an
        # object's keys its own way, and writes 1e16 as an integer)
        return record.output

    async def _keep_if_draining(self, name: str, output: Any) -> None:
        if self._book.draining():
            await self._book.keep(name, output)

    async def sleep(
        self, name_or_duration: str | Duration, duration: Duration | None = None
    ) -> None:
        """Park the run until the wake time; the attempt is not counted and no process waits.

        `sleep('1d')` derives the step name; `sleep('wait-for-approval', '1d')` names it.
        """
        name, length = self._book.sleep_name(name_or_duration, duration)
        wake_at = await _sleep_step(self._book, name, length)
        if wake_at is not None:
            raise StepSuspension(wake_at - datetime.now(UTC), name, wake_at)

    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        match: str | None = None,
        timeout: Duration | None = None,
        required: bool = True,
    ) -> Any:
        """Park the run until an event named `event` (with correlation key `match`, if given) is
        published after the wait began; answer its payload. Past `timeout`, a required wait
        fails with X_JOB_TIMEOUT naming the step; an optional one answers None.
        The run re-polls every `event_poll` (declared on the job), and a publish wakes it at once.
        """
        limit = None if timeout is None else parse_duration(timeout, field="timeout")
        done, answer = await _wait_step(self._book, name, event, match, limit, required)
        if not done:
            raise answer
        return answer

    async def enqueue(
        self,
        job: Job[I],
        input: I | Mapping[str, Any],
        *,
        name: str | None = None,
        **options: Any,
    ) -> JobHandle:
        """Enqueue `job` once ever for this run, as a child of this job: a replay answers the
        same child. Its settle wakes this run when it waits for it (`wait_for`). Options as
        `job.enqueue`'s (delay, run_at, queue, priority, on_conflict). The step's name is
        `enqueue:<job>#<n>` (the n-th enqueue of the run) unless `name` is given."""
        (child,) = await _enqueue_step(self._book, job, [input], name, options)
        return child

    async def enqueue_many(
        self,
        job: Job[I],
        inputs: Sequence[I | Mapping[str, Any]],
        *,
        name: str | None = None,
        **options: Any,
    ) -> list[JobHandle]:
        """Enqueue a child of `job` for each input, in one step and one statement: a fan-out
        of thousands costs one round trip (at most 10,000 a step). As `enqueue` otherwise."""
        if not inputs:
            return []
        return await _enqueue_step(self._book, job, list(inputs), name, options)

    async def wait_for(
        self,
        *children: JobHandle | UUID,
        return_exceptions: bool = False,
        name: str | None = None,
        poll: Duration = DEFAULT_CHILD_POLL,
    ) -> list[Any]:
        """Park the run, holding no process and no slot, until every child has settled; answer
        their results in the order given. A failed, dead or cancelled child raises its error
        (the first, in that order), or with `return_exceptions=True` takes its place in the
        list, as asyncio.gather does. A child's settle wakes the run at once; `poll` is how
        often it looks again when no wake comes."""
        done, answer = await _wait_children_step(
            self._book, children, return_exceptions, name, poll
        )
        if not done:
            raise answer
        return answer  # type: ignore[no-any-return]


class SyncSteps:
    """Steps for plain `def` handlers, which run in a worker thread."""

    def __init__(self, book: StepBook, loop: asyncio.AbstractEventLoop) -> None:
        self._book = book
        self._loop = loop

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # blocking here would freeze the loop that must run the write: refuse instead
            coroutine.close()
            raise ArgumentInvalid(
                "the step API of a plain def handler was called on the event loop; declare the "
                "handler `async def` (a wrapper needs functools.wraps)",
                detail={},
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def run(self, name: str, fn: Callable[..., T]) -> T:
        """Run `fn` once ever for this run and store its result; replay it on later attempts."""
        replay = self._book.begin(name)
        if replay is not None:
            return replay.output  # type: ignore[no-any-return]
        self._book.signal.raise_if_set()
        signal, timer = self._book.step_signal()
        try:
            output = fn(signal) if _takes_signal(fn) else fn()
            if inspect.isawaitable(output):
                output = self._on_loop(_until_cancelled(output, signal))
        finally:
            if timer is not None:
                timer.cancel()
        timeout = self._book.timed_out(name, signal)
        if timeout is not None:
            raise timeout
        if self._book.draining():
            # ran to its end while the attempt drained: kept, not run again (Steps.run)
            self._on_loop(self._book.keep(name, output))
        output = self._book.stored_form(name, output)
        self._book.signal.raise_if_set()
        record = self._on_loop(
            self._book.writer.record_step(name, StepStatus.COMPLETED, output=output)
        )
        self._book.ran.append(name)
        return record.output  # type: ignore[no-any-return]  # as a replay answers it (Steps.run)

    def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        match: str | None = None,
        timeout: Duration | None = None,
        required: bool = True,
    ) -> Any:
        """Park the run until a matching event is published (see AsyncSteps.wait_for_event)."""
        limit = None if timeout is None else parse_duration(timeout, field="timeout")
        done, answer = self._on_loop(_wait_step(self._book, name, event, match, limit, required))
        if not done:
            raise answer
        return answer

    def enqueue(
        self,
        job: Job[I],
        input: I | Mapping[str, Any],
        *,
        name: str | None = None,
        **options: Any,
    ) -> JobHandle:
        """Enqueue a child once ever for this run (see AsyncSteps.enqueue)."""
        (child,) = self._on_loop(_enqueue_step(self._book, job, [input], name, options))
        return child

    def enqueue_many(
        self,
        job: Job[I],
        inputs: Sequence[I | Mapping[str, Any]],
        *,
        name: str | None = None,
        **options: Any,
    ) -> list[JobHandle]:
        """Enqueue many children in one step (see AsyncSteps.enqueue_many)."""
        if not inputs:
            return []
        return self._on_loop(_enqueue_step(self._book, job, list(inputs), name, options))

    def wait_for(
        self,
        *children: JobHandle | UUID,
        return_exceptions: bool = False,
        name: str | None = None,
        poll: Duration = DEFAULT_CHILD_POLL,
    ) -> list[Any]:
        """Park the run until every child has settled (see AsyncSteps.wait_for)."""
        done, answer = self._on_loop(
            _wait_children_step(self._book, children, return_exceptions, name, poll)
        )
        if not done:
            raise answer
        return answer  # type: ignore[no-any-return]

    def sleep(self, name_or_duration: str | Duration, duration: Duration | None = None) -> None:
        """Park the run until the wake time (see AsyncSteps.sleep)."""
        name, length = self._book.sleep_name(name_or_duration, duration)
        wake_at = self._on_loop(_sleep_step(self._book, name, length))
        if wake_at is not None:
            raise StepSuspension(wake_at - datetime.now(UTC), name, wake_at)


async def _wait_step(
    book: StepBook,
    name: str,
    event: str,
    match: str | None,
    timeout: timedelta | None,
    required: bool,
) -> tuple[bool, Any]:
    """Answer (True, payload) when the wait is over, or (False, the StepSuspension to raise)."""
    replay = book.begin(name)
    if replay is not None:
        return True, replay.output
    book.signal.raise_if_set()
    stored = book.records.get(name)
    timed_out = stored is not None and stored.status is StepStatus.FAILED
    if stored is not None and timed_out and _ran_on_after(book, stored):
        # the run caught the timeout and went on: its replay must meet the same timeout, or an
        # event published since would complete the wait and the replay take the other branch
        raise _waited_in_vain(name, event, match, timeout)
    if stored is not None and stored.status in (StepStatus.WAITING, StepStatus.FAILED):
        # a retry after an uncaught timeout looks once more, from when the wait began
        began = stored.started_at
    else:
        waiting = await book.writer.record_step(
            name, StepStatus.WAITING, output={"event": event, "match": match}
        )
        began = waiting.started_at  # the database's clock: the one a publish is stamped with
    lookup = await book.writer.find_event(event, match, began)
    if lookup.found:
        await book.writer.record_step(name, StepStatus.COMPLETED, output=lookup.payload)
        book.ran.append(name)
        return True, lookup.payload
    if timed_out or (timeout is not None and lookup.now >= began + timeout):
        if required:
            if not timed_out:
                await book.writer.record_step(
                    name, StepStatus.FAILED, output={"event": event, "match": match}
                )
            raise _waited_in_vain(name, event, match, timeout)
        await book.writer.record_step(name, StepStatus.COMPLETED, output=None)
        book.ran.append(name)
        return True, None
    wake = lookup.now + book.event_poll
    if timeout is not None:
        wake = min(wake, began + timeout)
    # the delay on the database's clock, carried over to this process's clock
    return False, StepSuspension(wake - lookup.now, name)


def _ran_on_after(book: StepBook, failed: StepRecord) -> bool:
    """Whether the run recorded a step after `failed` failed: it caught the failure."""
    ended = failed.finished_at
    return ended is not None and any(
        record.name != failed.name and record.started_at >= ended
        for record in book.records.values()
    )


def _waited_in_vain(
    name: str, event: str, match: str | None, timeout: timedelta | None
) -> JobTimeout:
    return JobTimeout(
        f"step {name!r} waited {timeout} for event {event!r} and none came",
        detail={"step": name, "event": event, "match": match},
    )


async def _enqueue_step(
    book: StepBook,
    job: Job[Any],
    inputs: Sequence[Any],
    name: str | None,
    options: dict[str, Any],
) -> list[JobHandle]:
    """Enqueue a child of `job` for each input, once ever for the run; a replay answers the
    children the step recorded."""
    step = book.enqueue_name(job, name)
    replay = book.begin(step)
    if replay is None:
        book.signal.raise_if_set()
        requests = [job.request(input, **options) for input in inputs]
        answers = await book.writer.enqueue_children(step, requests)
        book.ran.append(step)
        ids = [(answer.id, answer.run_id, answer.deduped) for answer in answers]
    else:
        stored = replay.output
        run_ids = stored.get("run_ids") or {}
        ids = [
            (UUID(id), UUID(run_ids.get(id, id)), bool(deduped))
            for id, deduped in zip(stored["enqueued"], stored["deduped"], strict=True)
        ]
    url = job.registry.database_url
    return [
        JobHandle(id, run_id, deduped, job=job, database_url=url) for id, run_id, deduped in ids
    ]


async def _wait_children_step(
    book: StepBook,
    children: Sequence[JobHandle | UUID],
    return_exceptions: bool,
    name: str | None,
    poll: Duration,
) -> tuple[bool, Any]:
    """Answer (True, the results) when every child has settled, or (False, the suspension
    to raise: the database parked the run)."""
    if not children:
        raise ArgumentInvalid("wait_for needs at least one child", detail={})
    ids = [child if isinstance(child, UUID) else child.id for child in children]
    jobs = {child.id: child.job for child in children if isinstance(child, JobHandle)}
    every = parse_duration(poll, field="poll")
    step = (
        name
        or "wait_for:"
        + hashlib.sha1(",".join(str(id) for id in ids).encode(), usedforsecurity=False).hexdigest()[
            :20
        ]
    )
    replay = book.begin(step)
    if replay is not None:
        outcomes = replay.output["outcomes"]
    else:
        book.signal.raise_if_set()
        wait = await book.writer.wait_children(step, ids, every)
        if not wait.settled:
            return False, StepSuspension(every, step, parked=True)
        book.ran.append(step)
        outcomes = wait.outcomes or []
    return True, _gathered(outcomes, jobs, return_exceptions)


def _gathered(
    outcomes: list[dict[str, Any]],
    jobs: dict[UUID, ResultReader | None],
    return_exceptions: bool,
) -> list[Any]:
    """The children's results in order, as asyncio.gather answers them."""
    answers: list[Any] = []
    for stored in outcomes:
        id = UUID(stored["id"])
        failure: BaseException
        if stored.get("state") is None:
            failure = JobFailed(
                f"child {id} names no job of this run's tenant (removed, or never one)",
                detail={"id": str(id), "state": None, "error": None, "error_code": None},
            )
            failure.__cause__ = JobNotFound(f"no job has id {id}", detail={"id": str(id)})
        else:
            outcome = JobOutcome(
                id,
                JobState(stored["state"]),
                stored.get("result"),
                stored.get("error"),
                stored.get("error_code"),
                None,
            )
            if outcome.state is JobState.DONE:
                job = jobs.get(id)
                answers.append(outcome.result if job is None else job.read_result(outcome.result))
                continue
            failure = _child_failure(outcome)
        if not return_exceptions:
            raise failure
        answers.append(failure)
    return answers


def _child_failure(outcome: JobOutcome) -> JobFailed:
    """A child's failed, dead or cancelled ending, as its parent's body sees it: always
    JobFailed, terminal for the parent (every later attempt replays the same stored outcome),
    and never the parent's own JobCancelled or JobTimeout, which would read as the parent's own
    cancel or deadline. The error the child's stored code names is its cause."""
    failure = JobFailed(
        f"child {outcome.id} ended {outcome.state}: {outcome.error}",
        detail={
            "id": str(outcome.id),
            "state": str(outcome.state),
            "error": outcome.error,
            "error_code": outcome.error_code,
        },
    )
    failure.__cause__ = failure_of(outcome)
    return failure


async def _sleep_step(book: StepBook, name: str, length: timedelta) -> datetime | None:
    """Answer the wake time to suspend until, or None when the sleep is over."""
    replay = book.begin(name)
    if replay is not None:
        return None
    book.signal.raise_if_set()
    now = datetime.now(UTC)
    stored = book.records.get(name)
    if stored is not None and stored.wake_at is not None:
        if stored.wake_at <= now:
            await book.writer.record_step(name, StepStatus.COMPLETED, output=None)
            book.ran.append(name)
            return None
        return stored.wake_at
    wake_at = now + length
    await book.writer.record_step(name, StepStatus.SLEEPING, wake_at=wake_at)
    return wake_at


async def _until_cancelled(awaitable: Awaitable[T], signal: CancelSignal) -> T:
    """Await `awaitable`, cancelling it when `signal` is set (then raise X_ABORTED)."""
    task = asyncio.ensure_future(awaitable)
    loop = asyncio.get_running_loop()
    signal.on_cancel(lambda _reason: loop.call_soon_threadsafe(task.cancel))
    try:
        return await task
    except asyncio.CancelledError:
        outer = asyncio.current_task()
        if signal.is_set and (outer is None or outer.cancelling() == 0):
            raise _aborted(signal) from None
        raise


def _aborted(signal: CancelSignal) -> Aborted:
    return Aborted(
        f"the attempt was cancelled: {signal.reason}",
        detail={"reason": None if signal.reason is None else signal.reason.code},
    )


def new_book(
    records: dict[str, StepRecord],
    writer: StepWriter,
    signal: CancelSignal,
    step_timeout: timedelta | None,
    event_poll: timedelta = DEFAULT_EVENT_POLL,
) -> StepBook:
    return StepBook(records, writer, signal, step_timeout, event_poll)
