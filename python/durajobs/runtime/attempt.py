"""Execute one claimed attempt: run the body, then settle the row with one decision.

The verdict is read in this order: the signal's reason (a drain interrupts, a lost lease or a
cancel leaves the row alone, a deadline fails the attempt), then how the body ended (returned,
suspended by a step, raised). Settling is not part of the retry decision: a settle that fails is
logged and the lease brings the job back; it is never mistaken for a job failure.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from types import CoroutineType
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

from pydantic import BaseModel

from durajobs._db import calls
from durajobs._values.records import ChildWait, ClaimedJob, EnqueueResult, EventLookup, StepRecord
from durajobs._values.states import NackTarget, StepStatus
from durajobs._values.storable import plain_text
from durajobs.declare.enqueue import EnqueueRequest
from durajobs.declare.registry import NO_TENANT, Job, Registry, Settled
from durajobs.declare.retry import ErrorClass, classify
from durajobs.errors import (
    Aborted,
    DeclarationInvalid,
    Draining,
    DurajobsError,
    JobCancelled,
    JobLeaseLost,
    JobOnSettledFailed,
    JobResultInvalid,
    JobRowStatusUnknown,
    JobTenantMismatch,
    JobTimeout,
)
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.progress import ProgressReporter
from durajobs.runtime.settler import OnAnswer, Settler
from durajobs.runtime.steps import AsyncSteps, StepBook, StepSuspension, SyncSteps, new_book

log = logging.getLogger(__name__)

T = TypeVar("T")
I = TypeVar("I", bound=BaseModel)  # noqa: E741

UNKNOWN_JOB_PARK = timedelta(seconds=30)
ON_SETTLED_TRIES = 3
UNWIND_GRACE_SECONDS = 0.5
HISTORY_RETRY = timedelta(seconds=1)
MAX_STATED_WAIT_SECONDS = 365 * 24 * 3600.0  # a NaN fails the >= test; inf lands here
# an error's message and trace are cut to the default 'error_text' size limit (011_bounds.sql)
# before they are sent: the database cuts to its own, but a batch of nacks is one jsonb value
ERROR_TEXT_BYTES = 65_536
MAX_CODE_BYTES = 200  # what jobs.nack_v1 keeps of a code


class Outcome(StrEnum):
    COMPLETED = "completed"
    SUSPENDED = "suspended"
    RETRIED = "retried"
    DEAD_LETTERED = "dead-lettered"
    DROPPED = "dropped"
    INTERRUPTED = "interrupted"
    PARKED = "parked"  # a job this deploy cannot run, handed on uncounted
    CANCELLED = "cancelled"  # an operator cancelled the row: nothing to settle
    LEASE_LOST = "lease-lost"  # another claim owns the row: nothing to settle
    UNOWNED = "unowned"  # the settle matched nothing
    REFUSED = "refused"  # the claim settled it failed: another run held its concurrency key


class Database(Protocol):
    async def run(self, call: calls.Call[T]) -> T: ...


class Lease(Protocol):
    def stop(self) -> None:
        """Stop renewing: called right before the settle is sent."""

    def overdue(self) -> float:
        """Seconds past the lease's end on this process's clock (zero or less: still held)."""


class _Context(Generic[I]):
    """What every handler receives: its input, the attempt's facts, its signal and progress.

    Read from the claimed row when asked; the step API and the progress reporter are made on
    first use, so an attempt that never takes a step or reports pays for neither."""

    __slots__ = ("_attempt", "input", "signal")

    def __init__(self, input: I, attempt: Attempt) -> None:
        self.input = input
        self.signal = attempt.signal
        self._attempt = attempt

    @property
    def job(self) -> str:
        return self._attempt.claimed.name

    @property
    def job_id(self) -> UUID:
        return self._attempt.claimed.id

    @property
    def run_id(self) -> UUID:
        return self._attempt.claimed.run_id

    @property
    def queue(self) -> str:
        return self._attempt.claimed.queue

    @property
    def attempt(self) -> int:
        return self._attempt.claimed.attempt

    @property
    def max_attempts(self) -> int:
        return self._attempt.claimed.max_attempts

    @property
    def tenant_id(self) -> str | None:
        return self._attempt.claimed.tenant_id

    @property
    def enqueued_by(self) -> str | None:
        return self._attempt.claimed.enqueued_by

    async def _call_database(self, call: calls.Call[T]) -> T:
        """Run one call of a jobs function on the worker's database: for the package's own job
        factories (their ledgers), not an application's queries."""
        return await self._attempt._db.run(call)

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the run has got; written at most once a second, and before the settle.

        Never blocks and never fails the job over a write; a bad value raises ArgumentInvalid.
        """
        self._attempt.reporter.report(done, total, note)

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def cancelled(self) -> bool:
        """True once the attempt is cancelled: stop and return or raise."""
        return self.signal.is_set

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(job={self.job!r}, job_id={self.job_id!r}, "
            f"attempt={self.attempt}, input={self.input!r})"
        )


class JobContext(_Context[I]):
    """What an `async def` handler receives: `await ctx.step.run(...)`."""

    __slots__ = ("_step",)

    def __init__(self, input: I, attempt: Attempt) -> None:
        # _Context.__init__'s assignments, inline: one of these is made for every attempt
        self.input = input
        self.signal = attempt.signal
        self._attempt = attempt
        self._step: AsyncSteps | None = None

    @property
    def step(self) -> AsyncSteps:
        if self._step is None:
            self._step = AsyncSteps(self._attempt.book)
        return self._step


class SyncJobContext(_Context[I]):
    """What a plain `def` handler receives (it runs in a thread): `ctx.step.run(...)`."""

    __slots__ = ("_step",)

    def __init__(self, input: I, attempt: Attempt, step: SyncSteps) -> None:
        super().__init__(input, attempt)
        self._step = step

    @property
    def step(self) -> SyncSteps:
        return self._step


@dataclass
class JobExecution:
    """What one attempt produced."""

    outcome: Outcome
    job_id: UUID
    name: str
    attempt: int
    duration: timedelta
    resume_at: datetime | None = None
    error: str | None = None
    code: str | None = None
    stop_reason: str | None = None
    steps: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    result: Any = None


class _Writer:
    """The step writer for one attempt: fenced in process (the signal) and in SQL (the claim)."""

    def __init__(
        self, db: Database, claimed: ClaimedJob, signal: CancelSignal, lease: Lease
    ) -> None:
        self._db, self._claimed, self._signal, self._lease = db, claimed, signal, lease

    async def record_step(
        self,
        name: str,
        status: StepStatus,
        *,
        output: Any = None,
        wake_at: datetime | None = None,
        through_drain: bool = False,
    ) -> StepRecord:
        if not (through_drain and isinstance(self._signal.reason, Draining)):
            self._signal.raise_if_set()
        return await self._db.run(
            calls.record_step(self._claimed.fence, name, status, output=output, wake_at=wake_at)
        )

    async def find_event(self, event: str, match: str | None, after: datetime) -> EventLookup:
        # the run's tenant: an event published for another tenant is not this run's
        return await self._db.run(
            calls.find_event(
                event, correlation_key=match, after=after, tenant_id=self._claimed.tenant_id
            )
        )

    async def enqueue_children(
        self, name: str, requests: Sequence[EnqueueRequest]
    ) -> list[EnqueueResult]:
        self._signal.raise_if_set()
        entries = [request.child_entry() for request in requests]
        return await self._db.run(calls.enqueue_children(self._claimed.fence, name, entries))

    async def wait_children(self, name: str, ids: Sequence[UUID], poll: timedelta) -> ChildWait:
        self._signal.raise_if_set()
        wait = await self._db.run(calls.wait_children(self._claimed.fence, name, ids, poll=poll))
        if not wait.settled:
            # parked: a renewal answered after this is not a lost lease, as after a settle
            self._lease.stop()
        return wait


def _error_text(error: BaseException) -> str:
    return str(error) if isinstance(error, DurajobsError) else f"{type(error).__name__}: {error}"


def _retry_after(error: BaseException) -> timedelta | None:
    """The wait an error states (seconds or a timedelta); anything enormous is capped, since
    the policy's max_delay clamps it anyway."""
    stated = getattr(error, "retry_after", None)
    if isinstance(stated, timedelta):
        return stated if stated >= timedelta(0) else None
    if isinstance(stated, int | float) and not isinstance(stated, bool) and stated >= 0:
        return timedelta(seconds=min(float(stated), MAX_STATED_WAIT_SECONDS))
    return None


async def run_attempt(
    claimed: ClaimedJob,
    registry: Registry,
    *,
    db: Database,
    signal: CancelSignal,
    lease: Lease,
    on_abandoned: Callable[[JobExecution], None] | None = None,
    executor: Executor | None = None,
    on_lingering: Callable[[asyncio.Future[Any]], None] | None = None,
    settler: Settler | None = None,
    on_body_done: Callable[[], None] | None = None,
) -> JobExecution:
    """Run one claimed attempt and settle it; never raises for anything the job did.

    A plain `def` handler runs on `executor` (the loop's default when None).
    """
    attempt = Attempt(
        claimed,
        registry,
        db=db,
        signal=signal,
        lease=lease,
        settler=settler,
        on_abandoned=on_abandoned,
    )
    return await attempt.run(
        executor=executor, on_lingering=on_lingering, on_body_done=on_body_done
    )


@dataclass(slots=True)
class BodyEnding:
    """How a body ended, as the verdict reads it."""

    result: Any = None
    error: BaseException | None = None
    suspension: StepSuspension | None = None


class Body:
    """A started handler: its future, and how to wait for it under the attempt's signal."""

    def __init__(
        self,
        job: Job[Any],
        signal: CancelSignal,
        future: asyncio.Future[Any] | None,
        *,
        refused: BaseException | None = None,
        on_late: Callable[[], None],
    ) -> None:
        self.job, self.signal, self.future = job, signal, future
        self._refused = refused  # the body never started (its input did not parse)
        self._on_late = on_late

    async def ending(
        self, on_lingering: Callable[[asyncio.Future[Any]], None] | None = None
    ) -> BodyEnding:
        try:
            return BodyEnding(result=await self._wait(on_lingering))
        except StepSuspension as parked:
            return BodyEnding(suspension=parked)
        except Exception as failure:
            return BodyEnding(error=failure)

    async def _wait(self, on_lingering: Callable[[asyncio.Future[Any]], None] | None) -> Any:
        """Wait until the body ends or the signal is set.

        After a drain the body is waited for (the worker's drain deadline bounds it): settling
        it first would let another worker run a second copy. After a deadline, a lost lease or
        a cancel, it gets a short grace to unwind, then the attempt ends without it; durable
        writes it makes later are refused by the signal and the claim fence. A plain def body
        that keeps running is handed to `on_lingering`, so its worker keeps the slot (and the
        thread) counted.
        """
        if self._refused is not None:
            raise self._refused
        task, signal, job = self.future, self.signal, self.job
        assert task is not None
        if not task.done() and signal.reason is None:
            loop = asyncio.get_running_loop()
            # one future for "the body ended or the signal was set": cheaper than asyncio.wait
            ended_or_stopped: asyncio.Future[None] = loop.create_future()
            task.add_done_callback(lambda _task: _resolve(ended_or_stopped))
            signal.on_cancel(lambda _reason: loop.call_soon_threadsafe(_resolve, ended_or_stopped))
            await ended_or_stopped
        if not task.done():
            grace = None if isinstance(signal.reason, Draining) else UNWIND_GRACE_SECONDS
            await asyncio.wait({task}, timeout=grace)
        if not task.done():
            task.add_done_callback(lambda _task: self._on_late())
            if on_lingering is not None and not job.is_async:
                on_lingering(task)
            raise Aborted("the attempt was cancelled and its body has not stopped", detail={})
        try:
            result = task.result()
        except asyncio.CancelledError:
            raise Aborted("the attempt was cancelled", detail={}) from None
        if inspect.isawaitable(result):
            # a plain def handed back a coroutine: running it here would run its sync steps on
            # the loop they need; the declaration must say async def (functools.wraps on a
            # wrapper)
            if inspect.iscoroutine(result):
                result.close()
            raise DeclarationInvalid(
                f"job {job.name}: the handler is a plain def that returned a coroutine; declare "
                "it `async def`, or wrap it with functools.wraps",
                detail={"job": job.name},
            )
        return result


class Attempt:
    """One claimed attempt: start its body, then settle the row with one verdict.

    `run()` is the whole of it. A worker may instead start the body itself (`open_now()`)
    and, when the body ended cleanly, `settle_soon()` from a callback: no task of its own for
    the common case.
    """

    __slots__ = (
        "_batch",
        "_book",
        "_db",
        "_deadline",
        "_loop",
        "_on_abandoned",
        "_one_settler",
        "_records",
        "_reporter",
        "began",
        "claimed",
        "job",
        "lease",
        "signal",
    )

    def __init__(
        self,
        claimed: ClaimedJob,
        registry: Registry,
        db: Database,
        signal: CancelSignal,
        lease: Lease,
        settler: Settler | None = None,
        on_abandoned: Callable[[JobExecution], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`loop`: the running loop, when the caller has it at hand (asking asyncio for it is a
        getpid system call)."""
        self.began = time.monotonic()
        self.claimed = claimed
        self.job = registry.get(claimed.name)
        self.signal = signal
        self.lease = lease
        self._db = db
        self._on_abandoned = on_abandoned
        self._loop = asyncio.get_running_loop() if loop is None else loop
        # made on first use: most attempts never report progress or take a step
        self._reporter: ProgressReporter | None = None
        self._batch = settler
        self._one_settler: _Settler | None = None  # made when the verdict needs one
        # the run's stored steps, read before the body when it may have some (None: none)
        self._records: dict[str, StepRecord] | None = None
        self._book: StepBook | None = None
        self._deadline: asyncio.TimerHandle | None = None

    @property
    def reporter(self) -> ProgressReporter:
        """The attempt's progress reporter, made on the first report."""
        if self._reporter is None:
            self._reporter = ProgressReporter(self._db, self.claimed, self._loop)
            if self._one_settler is not None:
                self._one_settler.progress = self._reporter
        return self._reporter

    @property
    def _settler(self) -> _Settler:
        if self._one_settler is None:
            self._one_settler = _Settler(
                self._db, self.lease, self.claimed, self._reporter, self._batch
            )
        return self._one_settler

    @property
    def book(self) -> StepBook:
        """The attempt's step book, made on the first step."""
        if self._book is None:
            job = self.job
            assert job is not None, "steps need a registered job"
            self._book = new_book(
                {} if self._records is None else self._records,
                _Writer(self._db, self.claimed, self.signal, self.lease),
                self.signal,
                job.step_timeout,
                job.event_poll,
            )
        return self._book

    def finish(self, outcome: Outcome, **fields: Any) -> JobExecution:
        if self._book is not None:
            fields.setdefault("steps", self._book.ran)
            fields.setdefault("replayed", self._book.replayed)
        claimed = self.claimed
        return JobExecution(
            outcome=outcome,
            job_id=claimed.id,
            name=claimed.name,
            attempt=claimed.attempt,
            duration=timedelta(seconds=time.monotonic() - self.began),
            **fields,
        )

    async def run(
        self,
        *,
        executor: Executor | None = None,
        on_lingering: Callable[[asyncio.Future[Any]], None] | None = None,
        on_body_done: Callable[[], None] | None = None,
        on_body_started: Callable[[asyncio.Future[Any]], None] | None = None,
    ) -> JobExecution:
        claimed, job, settler = self.claimed, self.job, self._settler
        if job is None:
            park_reason = f'no job registered as "{claimed.name}"'
            await settler.nack(
                next_state=NackTarget.SUSPENDED,
                delay=UNKNOWN_JOB_PARK,
                counts_as_attempt=False,
                error=park_reason,
            )
            log.warning(
                "jobs.worker.unknown-job", extra={"job": claimed.name, "id": str(claimed.id)}
            )
            return self.finish(Outcome.PARKED, error=park_reason)
        try:
            # the claim said whether the run has a history: most first attempts skip the read
            history = await self._db.run(calls.steps(claimed.run_id)) if claimed.has_steps else []
        except JobRowStatusUnknown as unknown:
            # written by a newer deploy: hand the run on, uncounted, rather than re-run a step
            await settler.nack(
                next_state=NackTarget.SUSPENDED,
                delay=UNKNOWN_JOB_PARK,
                counts_as_attempt=False,
                error=str(unknown),
                error_code=unknown.code,
            )
            log.error(
                "jobs.step.status-unknown", extra={"job": claimed.name, "detail": unknown.detail}
            )
            return self.finish(Outcome.PARKED, error=str(unknown), code=unknown.code)
        except Exception as failure:
            # the history could not be read (a pool timeout, a dropped connection): hand the run
            # back uncounted rather than let its lease lapse into a counted, maybe final, attempt
            await settler.nack(
                next_state=NackTarget.READY, delay=HISTORY_RETRY, counts_as_attempt=False
            )
            log.error(
                "jobs.step.history-failed", extra={"job": claimed.name, "error": str(failure)}
            )
            return self.finish(Outcome.INTERRUPTED, error=_error_text(failure))
        body = self.start({r.name: r for r in history}, executor=executor, on_done=on_body_done)
        if on_body_started is not None and body.future is not None:
            on_body_started(body.future)
        return await self.conclude(await body.ending(on_lingering))

    def start(
        self,
        records: dict[str, StepRecord],
        *,
        executor: Executor | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> Body:
        """Start the body (a task, or a thread for a plain def); `on_done` when it has ended
        (a coroutine finished, or a plain def's thread returned), whatever happens after.

        An async body's task is cancelled when the signal is set (`open_now` leaves that to
        its caller)."""
        job, signal = self.job, self.signal
        assert job is not None, "start() needs a registered job"
        loop = self._loop
        self._records = records
        if job.timeout is not None:
            self._arm_deadline(job.timeout)
        try:
            if signal.reason is not None:
                # cancelled before the body began (a drain during the history read): a plain
                # def would run to its end only for its result to be thrown away and run again
                task: asyncio.Future[Any] = loop.create_future()
                task.cancel()
            else:
                task = self._launch(job, loop, executor)
        except Exception as refused:
            # the input did not parse, or calling the handler raised before its body ran (a
            # handler that takes no ctx): an ordinary failure of the attempt, decided as such
            if on_done is not None:
                on_done()
            return Body(job, signal, None, refused=refused, on_late=self._late)
        if job.is_async:
            # a thread cannot be cancelled: a plain def body reads the signal itself
            signal.on_cancel(lambda _reason: loop.call_soon_threadsafe(task.cancel))
        if on_done is not None:
            task.add_done_callback(lambda _task: on_done())
        return Body(job, signal, task, on_late=self._late)

    def open_now(self) -> Awaitable[Any]:
        """Parse the input and call the `async def` handler of a known job whose run has no
        stored step (no read first), and answer what it answered (its coroutine, not yet
        begun), or raise what refused it (`refused`). A worker's way to start the common
        attempt: no task, no Body and no callback on the signal, so the caller runs the body,
        stops it when the signal is set and decides the attempt when it ends."""
        job = self.job
        assert job is not None, "open_now() needs a registered job"
        if job.timeout is not None:
            self._arm_deadline(job.timeout)
        awaitable: Awaitable[Any] = job.handler(JobContext(self._parsed(job), self))
        if not isinstance(awaitable, CoroutineType):
            # a handler that only looks async (a sync wrapper of an async def) may answer a
            # future, or nothing awaitable: a TypeError here refuses the attempt as a failure
            return asyncio.ensure_future(awaitable)
        return awaitable

    def refused(self, error: BaseException) -> Body:
        """The Body of an attempt whose body never started: `error` is its verdict."""
        job = self.job
        assert job is not None
        return Body(job, self.signal, None, refused=error, on_late=self._late)

    def started(self, future: asyncio.Future[Any]) -> Body:
        """The Body of a body the worker started itself (`open_now`), for `conclude`: `future`
        is its task, or a done future that holds how it ended."""
        job = self.job
        assert job is not None
        return Body(job, self.signal, future, on_late=self._late)

    def _arm_deadline(self, limit: timedelta) -> None:
        name, signal = self.claimed.name, self.signal
        self._deadline = self._loop.call_later(
            limit.total_seconds(),
            lambda: signal.cancel(JobTimeout(f"job {name} ran past its timeout of {limit}")),
        )

    def _launch(
        self, job: Job[Any], loop: asyncio.AbstractEventLoop, executor: Executor | None
    ) -> asyncio.Future[Any]:
        """Parse the input, build the context and start the body: a task, or a thread."""
        model = self._parsed(job)
        if job.is_async:
            started = job.handler(JobContext(model, self))
            if isinstance(started, CoroutineType):
                return loop.create_task(started)
            return asyncio.ensure_future(started)
        context = SyncJobContext(model, self, SyncSteps(self.book, loop))
        # the thread runs in a copy of this context, so the attempt's span is its parent too
        body = contextvars.copy_context().run
        threaded: asyncio.Future[Any] = loop.run_in_executor(executor, body, job.handler, context)
        return threaded

    def _parsed(self, job: Job[Any]) -> Any:
        """The claimed input, parsed by the job's model; raises X_JOB_INPUT_INVALID, or
        X_JOB_TENANT_MISMATCH when the input names another tenant than the row's."""
        claimed = self.claimed
        model = job.parse_json(claimed.input_json)
        if job.tenant != NO_TENANT:
            # the row's tenant is what the run acts for: it must be the one its input names, or
            # a row written before the tenant rule (or by hand) would act for the wrong org
            named = job.tenant(model)
            if named != claimed.tenant_id:
                raise JobTenantMismatch(
                    f"job {claimed.name}: the row acts for tenant {claimed.tenant_id!r}, its "
                    f"input names {named!r}",
                    detail={"job": claimed.name, "tenant": claimed.tenant_id, "named": named},
                )
        return model

    def settle_soon(self, task: asyncio.Future[Any], on_answer: OnAnswer) -> bool:
        """Ack the ended task of a body that returned None, from a callback and with no task
        of its own; `on_answer` is called with the settler's answer, which `acked()` turns into
        the outcome.

        Answers False (nothing done) when the verdict needs `conclude()` instead: the body did
        not end cleanly (or its signal is set), a progress report is still to be written, an
        on_settled hook is to be called, or settles are not batched.
        """
        job = self.job
        if (
            job is None
            or self.signal.reason is not None
            or not task.done()
            or task.cancelled()
            or task.exception() is not None
            # a value to store takes the acks that carry results (conclude)
            or task.result() is not None
            or job.on_settled is not None
            or not (self._reporter is None or self._reporter.idle)
            or self._batch is None
        ):
            return False
        if self._deadline is not None:
            self._stop_deadline()
        if self._reporter is not None:
            self._reporter.close()  # idle: nothing pending, so closing drops nothing
        lease = self.lease
        lease.stop()
        if lease.overdue() > 0:
            _warn_if_late(lease, self.claimed)
        claimed = self.claimed
        self._batch.ack_soon(claimed.id, claimed.claim, on_answer)
        return True

    def acked(self, landed: bool, failure: BaseException | None) -> Outcome:
        """The outcome of an ack sent by `settle_soon`, logged as `conclude` would log it."""
        if failure is not None:
            _log_failure(self.claimed, failure)
            return Outcome.UNOWNED
        return Outcome.COMPLETED if _landed(self.claimed, landed) else Outcome.UNOWNED

    async def conclude(self, ending: BodyEnding) -> JobExecution:
        """Read the verdict off the signal, then off how the body ended, and settle the row."""
        self._stop_deadline()
        claimed, signal, lease, settler = self.claimed, self.signal, self.lease, self._settler
        job = self.job
        assert job is not None
        error, suspension = ending.error, ending.suspension
        if isinstance(error, JobCancelled | JobLeaseLost) and signal.reason is None:
            # a step write met the fence before the heartbeat did: the same verdict
            lease.stop()
            if isinstance(error, JobLeaseLost):
                log.error(
                    "jobs.lease.lost",
                    extra={"job": claimed.name, "id": str(claimed.id), "reason": "fenced"},
                )
            signal.cancel(error)
        if suspension is not None and error is None and suspension.parked:
            # the database parked the run in the statement that saw a child still running: the
            # row is no longer this attempt's, so no signal since (a drain, a deadline, a
            # renewal that found the row parked) changes that, and nothing is to be settled
            lease.stop()
            if self._reporter is not None:
                self._reporter.close()
            return self.finish(Outcome.SUSPENDED, resume_at=datetime.now(UTC) + suspension.delay)
        reason = signal.reason
        # under a drain the verdict is the signal's, whatever the body did on its way out
        # (returned early or raised): handed back uncounted. A run parked by a step stays parked.
        if isinstance(reason, Draining) and suspension is None:
            landed = await settler.nack(next_state=NackTarget.READY, counts_as_attempt=False)
            log.info("jobs.attempt.interrupted", extra={"job": claimed.name, "id": str(claimed.id)})
            return self.finish(Outcome.INTERRUPTED if landed else Outcome.UNOWNED)
        if isinstance(reason, JobCancelled | JobLeaseLost) and self._reporter is not None:
            self._reporter.close()  # the attempt no longer owns the row: nothing more to report
        if isinstance(reason, JobCancelled):
            lease.stop()
            log.info("jobs.attempt.cancelled", extra={"job": claimed.name, "id": str(claimed.id)})
            return self.finish(Outcome.CANCELLED)
        if isinstance(reason, JobLeaseLost):
            lease.stop()
            return self.finish(Outcome.LEASE_LOST, error=str(reason), code=reason.code)
        if isinstance(reason, JobTimeout):
            error = reason  # the deadline fails the attempt, whatever the body said on its way out
        elif isinstance(error, Aborted) and reason is not None:
            error = reason

        if suspension is not None and error is None:
            if suspension.wake_at is not None:
                # a sleep: due at its recorded wake time, measured now, as the nack is sent
                delay = max(suspension.wake_at - datetime.now(UTC), timedelta(0))
            else:
                delay = suspension.delay  # a wait: measured on the database's clock
            landed = await settler.nack(
                next_state=NackTarget.SUSPENDED, delay=delay, counts_as_attempt=False
            )
            return self.finish(
                Outcome.SUSPENDED if landed else Outcome.UNOWNED,
                # no earlier than the row is due in the database (the nack started its delay)
                resume_at=suspension.wake_at or datetime.now(UTC) + delay,
            )

        stored = None
        if error is None:
            try:
                stored = job.stored_result(ending.result)
            except JobResultInvalid as invalid:
                error = invalid
        if error is None:
            landed = await settler.ack(stored)
            execution = self.finish(
                Outcome.COMPLETED if landed else Outcome.UNOWNED, result=ending.result
            )
            if landed:
                await _on_settled(job, claimed, execution)
            return execution

        return await _fail(job, claimed, error, settler=settler, finish=self.finish)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        claimed = self.claimed
        log.warning(
            "jobs.timeout.abandoned",
            extra={"job": claimed.name, "id": str(claimed.id), "attempt": claimed.attempt},
        )
        if self._on_abandoned is not None:
            self._on_abandoned(
                self.finish(Outcome.UNOWNED, error="the body finished after its attempt ended")
            )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _fail(
    job: Job[Any],
    claimed: ClaimedJob,
    error: BaseException,
    *,
    settler: _Settler,
    finish: Callable[..., JobExecution],
) -> JobExecution:
    code = getattr(error, "code", None)
    code = plain_text(code, MAX_CODE_BYTES) if isinstance(code, str) else None
    error_class = classify(code)
    # storable whatever the error holds (a NUL, a lone surrogate, megabytes of a response): a
    # nack the server refuses fails every other nack of its batch too
    text = plain_text(_error_text(error), ERROR_TEXT_BYTES)
    stack = plain_text("".join(traceback.format_exception(error)), ERROR_TEXT_BYTES)
    if error_class is ErrorClass.TERMINAL or claimed.attempt >= claimed.max_attempts:
        stop = "terminal" if error_class is ErrorClass.TERMINAL else "attempts-exhausted"
        dead_letter = job.retry.dead_letter
        verdict = (
            f"terminal code {code}"
            if stop == "terminal"
            else f"X_JOB_MAX_ATTEMPTS: {claimed.attempt} of {claimed.max_attempts} attempts spent"
        )
        landed = await settler.nack(
            next_state=NackTarget.DEAD if dead_letter else NackTarget.FAILED,
            error=f"{text} [{'dead-lettered' if dead_letter else 'dropped'}: {verdict}]",
            error_code=code,
            error_stack=stack,
        )
        outcome = Outcome.DEAD_LETTERED if dead_letter else Outcome.DROPPED
        log.error(
            "jobs.attempt.failed",
            extra={
                "job": claimed.name,
                "id": str(claimed.id),
                "attempt": claimed.attempt,
                "code": code,
                "stop": stop,
                "error": text,
            },
        )
        execution = finish(
            outcome if landed else Outcome.UNOWNED,
            error=text,
            code=code,
            stop_reason=stop,
        )
        if landed:
            await _on_settled(job, claimed, execution)
        return execution

    stated = _retry_after(error) if error_class is ErrorClass.RETRY_AFTER else None
    delay = job.retry.delay_after(claimed.attempt, retry_after=stated)
    landed = await settler.nack(
        next_state=NackTarget.READY,
        delay=delay,
        error=text,
        error_code=code,
        error_stack=stack,
    )
    log.warning(
        "jobs.attempt.failed",
        extra={
            "job": claimed.name,
            "id": str(claimed.id),
            "attempt": claimed.attempt,
            "code": code,
            "retry_in": delay.total_seconds(),
            "error": text,
        },
    )
    return finish(
        Outcome.RETRIED if landed else Outcome.UNOWNED,
        error=text,
        code=code,
        resume_at=datetime.now(UTC) + delay,
    )


@dataclass
class _Settler:
    """Sends the one settle of an attempt, fenced on its claim."""

    db: Database
    lease: Lease
    claimed: ClaimedJob
    progress: ProgressReporter | None = None
    batch: Settler | None = None

    async def ack(self, result: Any = None) -> bool:
        """Ack, storing `result` (JSON) when it is not None."""
        claimed = self.claimed
        if self.batch is not None:
            return await self._settle(self.batch.ack(claimed.id, claimed.claim, result))
        if result is None:
            return await self._settle(self.db.run(calls.ack(claimed.fence)))
        return await self._settle(self._ack_result(result))

    async def _ack_result(self, result: Any) -> bool:
        claimed = self.claimed
        landed = await self.db.run(
            calls.ack_results_landed(claimed.worker_id, [claimed.id], [claimed.claim], [result])
        )
        return bool(landed[0])

    async def nack(self, **options: Any) -> bool:
        claimed = self.claimed
        if self.batch is not None:
            return await self._settle(self.batch.nack(claimed.id, claimed.claim, options))
        return await self._settle(self.db.run(calls.nack(claimed.fence, **options)))

    async def _settle(self, sending: Awaitable[bool]) -> bool:
        """Send the one settle of this attempt; a miss or a failure is logged, never raised.

        `sending` is not started until the last progress report has landed and the lease keeper
        has stopped (a renewal racing the settle is not a loss).
        """
        try:
            if self.progress is not None:
                await self.progress.flush()  # the last report lands before the row leaves running
            self.lease.stop()
            _warn_if_late(self.lease, self.claimed)
            landed = await sending
        except Exception as failure:
            if inspect.iscoroutine(sending):
                sending.close()  # never started if the failure came first: no stray warning
            _log_failure(self.claimed, failure)
            return False
        return _landed(self.claimed, landed)


def _warn_if_late(lease: Lease, claimed: ClaimedJob) -> None:
    """A settle sent after the lease ran out may meet another claim's attempt of the row (then
    it lands nowhere): say so, with how late, before it goes."""
    late = lease.overdue()
    if late > 0:
        log.warning(
            "jobs.settle.late",
            extra={"job": claimed.name, "id": str(claimed.id), "late_seconds": round(late, 3)},
        )


def _log_failure(claimed: ClaimedJob, failure: BaseException) -> None:
    log.error(
        "jobs.settle.failed",
        extra={"job": claimed.name, "id": str(claimed.id), "error": _error_text(failure)},
    )


def _landed(claimed: ClaimedJob, landed: object) -> bool:
    if landed is False:
        log.warning("jobs.settle.unowned", extra={"job": claimed.name, "id": str(claimed.id)})
    return bool(landed)


async def _on_settled(job: Job[Any], claimed: ClaimedJob, execution: JobExecution) -> None:
    await notify_settled(
        job,
        Settled(
            job=job.name,
            job_id=claimed.id,
            run_id=claimed.run_id,
            outcome=str(execution.outcome),
            attempt=claimed.attempt,
            error=execution.error,
            code=execution.code,
            input=claimed.input,
            result=execution.result,
            tenant_id=claimed.tenant_id,
            queue=claimed.queue,
        ),
    )


async def notify_settled(job: Job[Any], settled: Settled) -> None:
    """Call the job's on_settled once for this ending, up to 3 tries; it never changes the row.

    A plain `def` hook runs in a thread, so a slow one never stalls the worker's loop.
    """
    if job.on_settled is None:
        return
    hook = job.on_settled
    for attempt in range(1, ON_SETTLED_TRIES + 1):
        try:
            if inspect.iscoroutinefunction(hook):
                await hook(settled)
            else:
                answer = await asyncio.to_thread(hook, settled)
                if inspect.isawaitable(answer):
                    await answer
            return
        except Exception as failure:
            fields: dict[str, Any] = {
                "job": job.name,
                "id": str(settled.job_id),
                "try": attempt,
                "error": _error_text(failure),
            }
            if attempt == ON_SETTLED_TRIES:
                # the last try: reported with its code and fix; the row stays as it settled
                fields.update(code=JobOnSettledFailed.code, fix=JobOnSettledFailed.fix)
            log.error("jobs.on-settled.failed", extra=fields)
