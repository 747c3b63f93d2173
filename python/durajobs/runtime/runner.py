"""The attempt runner: starts each claimed attempt under a kept lease and sees it to one settle.

Every attempt takes one path: prepared (its step history read when the claim says it may have
one), its body started, then decided once, when the body ends or its signal is set. The
`async def` bodies of a batch that need no read first start one after another in one task
(inline.py), unless a body of their job has suspended before; the others each in a task of
their own. An attempt whose body returned cleanly is acked from that moment's callback, its ack
joining the settler's next batch: no task, future or timer of its own beyond the body's.
Anything else (an error, a suspension, a cancel, a drain, a report still to write, an
on_settled hook) is concluded by a task, which settles it exactly as `Attempt.conclude` says.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from contextvars import Context, copy_context
from datetime import UTC, datetime, timedelta
from types import CoroutineType
from typing import Any
from uuid import UUID

from durajobs._values.records import ClaimedJob
from durajobs.declare.registry import Job, Registry
from durajobs.errors import DurajobsError
from durajobs.observe.metrics import WorkerMetrics
from durajobs.observe.tracing import job_span, spans_active
from durajobs.runtime.attempt import Attempt, Body, JobExecution, Outcome
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.inline import drive
from durajobs.runtime.lease import HeldLease, LeaseRenewer
from durajobs.runtime.settler import Settler

log = logging.getLogger(__name__)

LOCAL_TIMER_HORIZON = timedelta(minutes=1)
LOCAL_TIMER_MARGIN = 0.05  # seconds
SETTLE_POLL = 0.1  # seconds between looks at a drain's budget while attempts finish


class _Held(Attempt):
    """An attempt as the runner holds it, from its start to its settle (or abandonment): the
    attempt itself, with the runner's state of it. Its bound methods are its callbacks: no
    closure is made per attempt. Nothing it refers to refers back to it once it is closed (its
    signal forgets the listener), so an attempt leaves no cycle for the collector."""

    __slots__ = ("body", "deciding", "future", "released", "runner", "task")

    def __init__(
        self,
        runner: AttemptRunner,
        row: ClaimedJob,
        registry: Registry,
        db: Any,
        signal: CancelSignal,
        lease: HeldLease,
        settler: Settler,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        # positionally, and not through super(): one is made a job
        Attempt.__init__(self, row, registry, db, signal, lease, settler, None, loop)
        self.runner = runner
        self.future: asyncio.Future[Any] | None = None  # the body's task, started at once
        self.body: Body | None = None  # what conclude() reads, once the verdict needs it
        self.task: asyncio.Task[None] | None = None  # the task concluding it, if any
        self.released = False  # its slot given back
        self.deciding = False  # the verdict has begun: a second trigger is ignored

    def ended(self, _future: asyncio.Future[Any]) -> None:
        """The body's future is done."""
        self.runner._release(self)
        self.runner._decide(self)

    def signalled(self, _reason: DurajobsError) -> None:
        """The signal was set (maybe on another thread): stop the body, then decide."""
        self._loop.call_soon_threadsafe(self._stop_body)

    def _stop_body(self) -> None:
        if self.future is not None:
            self.future.cancel()
        self.runner._decide(self)

    def answered(self, landed: bool, failure: BaseException | None) -> None:
        """The settler answered this attempt's ack."""
        runner = self.runner
        try:
            if landed is True and failure is None:
                # the common answer: counted with its batch (report_batch), not one by one
                runner._unreported_completed[self.claimed.queue] += 1
                if runner._debug:
                    runner._log_ended(self.claimed, Outcome.COMPLETED)
            else:
                runner._count(self.claimed, self.acked(landed, failure), batched=True)
        finally:
            runner._close(self)


def _returned(loop: asyncio.AbstractEventLoop, value: Any) -> asyncio.Future[Any]:
    done = loop.create_future()
    done.set_result(value)
    return done


def _raised(loop: asyncio.AbstractEventLoop, error: BaseException) -> asyncio.Future[Any]:
    done = loop.create_future()
    if isinstance(error, asyncio.CancelledError):
        done.cancel()
    else:
        done.set_exception(error)
    return done


class AttemptRunner:
    """Runs the attempts of one worker; `start_all` each claimed batch, `settle_held` to wait."""

    def __init__(
        self,
        registry: Registry,
        *,
        db: Any,
        settler: Settler,
        leases: LeaseRenewer,
        metrics: WorkerMetrics,
        worker_id: str,
        on_slot_freed: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._worker_id = worker_id
        self._db = db
        self._settler = settler
        self._leases = leases
        self._metrics = metrics
        # called as each slot is freed: the worker points it at its claim loop's kick
        self.on_slot_freed = on_slot_freed
        # the jobs whose running rows hold a place under a declared limit: a lost lease of one
        # is a lost place (X_JOB_SLOT_LOST)
        self._limited = frozenset(
            job.name for job in registry.jobs() if job.concurrency is not None
        )
        self._async_jobs: dict[Job[Any], bool] = {}
        # the async jobs a body of which suspended when started inline: theirs start in a task
        # each, so a batch of them starts in one loop turn, not one a turn, and pays no
        # trampoline on each suspension
        self._suspending: set[Job[Any]] = set()
        self.executor: Executor | None = None  # plain def bodies run here (set by the worker)
        # keyed by the attempt itself (a UUID's hash is a Python call); ids() lists their rows
        self.running: dict[_Held, None] = {}
        self.per_queue: Counter[str] = Counter()
        # slots are taken while a body runs, not while its settle is on the wire: the next
        # claim overlaps the acks of the batch before
        self.taken = 0
        self.outcomes: Counter[str] = Counter()
        # outcomes of acks answered in a batch, not yet added to the metrics: a Prometheus
        # increment costs more than the rest of an ack's bookkeeping, so a batch adds once.
        # Completions, the common answer, by queue; outcomes counts them then too
        self._unreported: Counter[tuple[str, str]] = Counter()
        self._unreported_completed: Counter[str] = Counter()
        # whether each ended attempt is logged at debug level: asked again with each batch
        # claimed and each batch of acks answered
        self._debug = log.isEnabledFor(logging.DEBUG)
        self.abandoned_ids: set[UUID] = set()  # their bodies may still run: never given back
        self._emptied: asyncio.Event | None = None

    def ids(self) -> list[UUID]:
        """The ids of the rows held now."""
        return [held.claimed.id for held in self.running]

    # -- starting ----------------------------------------------------------------------------

    def start_all(self, rows: list[ClaimedJob], asked: float) -> None:
        """Start claimed rows; `asked` is when their claim was sent (their leases run from it)."""
        # asked once a batch: whether an attempt gets a span of its own, and the loop (asking
        # asyncio for it is a system call)
        traced = spans_active()
        loop = asyncio.get_running_loop()
        self._debug = log.isEnabledFor(logging.DEBUG)
        inline: list[_Held] = []
        for row in rows:
            held = self._hold(row, asked, loop)
            job = held.job
            if job is not None and not row.has_steps and not traced and self._is_async(job):
                if job in self._suspending:
                    self._start_task(held, loop)
                else:
                    inline.append(held)
            else:
                held.task = loop.create_task(self._run(held))
        if inline:
            # held by the loop until it runs, then by the attempt whose body it runs (if any)
            loop.create_task(self._run_inline(inline, 0))  # noqa: RUF006
        self._leases.batch_held()

    def _hold(self, row: ClaimedJob, asked: float, loop: asyncio.AbstractEventLoop) -> _Held:
        """Hold a claimed row: its lease kept, its slot taken."""
        signal = CancelSignal()
        lease = self._leases.hold(row, signal, asked, row.name in self._limited)
        held = _Held(self, row, self._registry, self._db, signal, lease, self._settler, loop)
        self.running[held] = None
        self.taken += 1
        self.per_queue[row.queue] += 1
        return held

    async def _run_inline(self, batch: list[_Held], first: int) -> Any:
        """Start the `async def` bodies of `batch` from `first` on, one after another in this
        task (none needs a read first); the first that suspends keeps this task and is run to
        its end here (inline.py says why). Answers what that body returned."""
        suspended = self._start_inline(batch, first)
        # what is left of the batch is another task's now: a long body must not keep it alive
        del batch
        if suspended is None:
            return None
        return await drive(*suspended)

    def _start_inline(
        self, batch: list[_Held], first: int
    ) -> tuple[Coroutine[Any, Any, Any], Context, Any] | None:
        task = asyncio.current_task()
        assert task is not None
        for index in range(first, len(batch)):
            held = batch[index]
            if held.signal.reason is not None:
                # set before the body began (a drain, a lost lease): it never runs
                self._ended_at_once(held, _raised(held._loop, asyncio.CancelledError()))
                continue
            context = copy_context()
            body = context.run(self._open, held)
            if body is None:
                continue
            if not isinstance(body, CoroutineType):  # inspect.iscoroutine, without its call
                self._start_in_task(held, asyncio.ensure_future(body))
                continue
            try:
                yielded = context.run(body.send, None)
            except StopIteration as returned:
                self._ended_at_once(held, _returned(held._loop, returned.value))
            except BaseException as raised:
                self._ended_at_once(held, _raised(held._loop, raised))
                if not isinstance(raised, Exception | asyncio.CancelledError):
                    # an exit or an interrupt: the task ends with it, the rest goes on elsewhere
                    self._hand_on(batch, index + 1)
                    raise
            else:
                # suspended: this task is the body's from now on
                if held.job is not None:  # it has: open_now needs one
                    self._suspending.add(held.job)
                self._hand_on(batch, index + 1)
                self._start_in_task(held, task)
                return body, context, yielded
            if task.cancelling():
                # a body that returned asked its task (this one) to stop: the rest must not
                # take the cancel as theirs
                self._hand_on(batch, index + 1)
                return None
        return None

    def _open(self, held: _Held) -> Awaitable[Any] | None:
        """Call the handler of `held` (`Attempt.open_now`); None when that refused it, the
        attempt then decided as the failure it is."""
        try:
            return held.open_now()
        except Exception as refused:
            # the input did not parse, or calling the handler raised: the verdict is a failure
            held.body = held.refused(refused)
            self._release(held)
            self._decide(held)
            return None

    def _start_task(self, held: _Held, loop: asyncio.AbstractEventLoop) -> None:
        """Start the async body of `held` in a task of its own (its job's bodies suspend)."""
        body = self._open(held)
        if isinstance(body, CoroutineType):
            self._start_in_task(held, loop.create_task(body))
        elif body is not None:
            self._start_in_task(held, asyncio.ensure_future(body))

    def _hand_on(self, batch: list[_Held], first: int) -> None:
        """Start what is left of `batch`, from `first` on, in a new task."""
        if first < len(batch):
            asyncio.get_running_loop().create_task(self._run_inline(batch, first))

    def _start_in_task(self, held: _Held, task: asyncio.Future[Any]) -> None:
        """The body runs in `task`: decide the attempt when it ends, stop it on the signal."""
        held.future = task
        task.add_done_callback(held.ended)
        # the lease renewer, the deadline and a drain set the signal from the loop, so nothing
        # set it since the check before the body began; a thread the body started may have
        held.signal.listener = held.signalled
        reason = held.signal.reason
        if reason is not None:
            held.signalled(reason)

    def _ended_at_once(self, held: _Held, outcome: asyncio.Future[Any]) -> None:
        """The body ended without suspending (or never began): `outcome` holds how."""
        held.future = outcome
        try:
            held.ended(outcome)
        except Exception as failure:
            # as a failing done callback would be: logged, and the rest of the batch still runs
            log.error(
                "jobs.worker.attempt-crashed",
                extra={"id": str(held.claimed.id), "error": str(failure)},
            )

    def _is_async(self, job: Job[Any]) -> bool:
        """Whether `job` has an `async def` handler, kept by job: asked for every attempt."""
        known = self._async_jobs.get(job)
        if known is None:
            known = self._async_jobs[job] = job.is_async
        return known

    def _decide(self, held: _Held) -> None:
        if held.deciding:
            return
        held.deciding = True
        future = held.future
        if future is not None and held.settle_soon(future, held.answered):
            return
        body = held.body
        if body is None:
            assert future is not None
            body = held.started(future)
        held.task = held._loop.create_task(self._conclude(held, body))

    async def _conclude(self, held: _Held, body: Body) -> None:
        try:
            self._record(held, await held.conclude(await body.ending()))
        except Exception as failure:
            log.error(
                "jobs.worker.attempt-crashed",
                extra={"id": str(held.claimed.id), "error": str(failure)},
            )
        finally:
            self._close(held)

    async def _run(self, held: _Held) -> None:
        """The attempts that start in a task: a history to read first, a plain def body, a span
        to run in, or a job this deploy does not know."""
        row = held.claimed
        lingering: list[asyncio.Future[Any]] = []
        try:
            with job_span(row):
                execution = await held.run(
                    executor=self.executor,
                    on_lingering=lingering.append,
                    on_body_done=lambda: self._release(held),
                    # for a drain to tell a body that has ended (cancel_all)
                    on_body_started=lambda body: setattr(held, "future", body),
                )
            self._record(held, execution)
        except Exception as failure:
            log.error(
                "jobs.worker.attempt-crashed", extra={"id": str(row.id), "error": str(failure)}
            )
        finally:
            if lingering:
                # a plain def body that ignored its cancel still holds a thread: keep its slot
                # taken until it returns (a drain's deadline bounds this wait)
                await asyncio.wait(lingering)
            self._close(held)

    # -- ending ------------------------------------------------------------------------------

    def _count(self, row: ClaimedJob, outcome: Outcome, *, batched: bool = False) -> None:
        self.outcomes[outcome] += 1
        if batched:
            self._unreported[row.queue, outcome] += 1
        else:
            self._metrics.observe(row.queue, outcome)
        if log.isEnabledFor(logging.DEBUG):
            self._log_ended(row, outcome)

    @staticmethod
    def _log_ended(row: ClaimedJob, outcome: Outcome) -> None:
        log.debug(
            "jobs.attempt.ended",
            extra={"job": row.name, "id": str(row.id), "outcome": str(outcome)},
        )

    def report_batch(self) -> None:
        """Add the outcomes of the acks answered since the last call to `outcomes` (the
        completions) and to the metrics (the settler calls it once it has answered a batch)."""
        self._debug = log.isEnabledFor(logging.DEBUG)
        if self._unreported_completed:
            completed, self._unreported_completed = self._unreported_completed, Counter()
            for queue, count in completed.items():
                self.outcomes[Outcome.COMPLETED] += count
                self._metrics.observe(queue, Outcome.COMPLETED, count)
        if self._unreported:
            unreported, self._unreported = self._unreported, Counter()
            for (queue, outcome), count in unreported.items():
                self._metrics.observe(queue, outcome, count)

    def _record(self, held: _Held, execution: JobExecution) -> None:
        self._count(held.claimed, execution.outcome)
        if execution.resume_at is not None:
            delay = execution.resume_at - datetime.now(UTC)
            if delay <= LOCAL_TIMER_HORIZON:
                # a little after the due time: a kick that comes early finds nothing and leaves
                # the row to the poll
                asyncio.get_running_loop().call_later(
                    max(delay.total_seconds(), 0) + LOCAL_TIMER_MARGIN, self.on_slot_freed
                )

    def _release(self, held: _Held) -> None:
        """Free the attempt's slot: when its body ends, or at the latest when it is closed."""
        if held.released:
            return
        held.released = True
        self.taken -= 1
        self.per_queue[held.claimed.queue] -= 1
        self.on_slot_freed()  # a freed slot refills at once

    def _close(self, held: _Held) -> None:
        held.lease.stop()
        held.signal.forget_callbacks()
        removed = self.running.pop(held, False) is None
        if removed and not self.running and self._emptied is not None:
            self._emptied.set()
        if not held.released:
            self._release(held)  # a body that never ran (or never ended) holds its slot to here

    # -- draining ----------------------------------------------------------------------------

    def cancel_all(self, reason: Callable[[ClaimedJob], DurajobsError]) -> None:
        """Set the signal of every held attempt whose body still runs, each with its own
        reason. One whose body has ended (its callback not yet run, or its settle under way)
        did not end because of it: signalled, it would be handed back and run again."""
        for held in list(self.running):
            body = held.future
            if held.released or (body is not None and body.done()):
                continue
            held.signal.cancel(reason(held.claimed))

    async def settle_held(self, time_left: Callable[[], float | None]) -> int:
        """Wait until every held attempt has settled, for as long as `time_left()` allows (None:
        without limit); past it, abandon the rest to their leases. Answers how many were."""
        if self._emptied is None:
            self._emptied = asyncio.Event()
        while self.running:
            # counted from the drain itself, not from here: a claim in flight when the drain
            # came (a slow or locked database) must not stretch the budget the platform gives
            left = time_left()
            if left == 0:
                return await self._abandon()
            self._emptied.clear()
            if not self.running:
                break
            try:
                async with asyncio.timeout(SETTLE_POLL if left is None else min(SETTLE_POLL, left)):
                    await self._emptied.wait()
            except TimeoutError:
                pass
        return 0

    async def _abandon(self) -> int:
        held = list(self.running)
        log.error(
            "jobs.worker.drain-abandoned",
            extra={"worker": self._worker_id, "abandoned": len(held)},
        )
        carriers = []
        for entry in held:
            self.abandoned_ids.add(entry.claimed.id)
            if entry.task is not None:
                entry.task.cancel()
                carriers.append(entry.task)
        self.running.clear()
        await asyncio.gather(*carriers, return_exceptions=True)
        return len(held)
