"""The attempt runner: starts each claimed attempt under a kept lease and sees it to one settle.

Every attempt takes one path: prepared (its step history read when the claim says it may have
one), its body started, then decided once, when the body ends or its signal is set. An attempt
whose body returned cleanly is acked from that moment's callback, its ack joining the settler's
next batch: no task, future or timer of its own beyond the body's. Anything else (an error, a
suspension, a cancel, a drain, a report still to write, an on_settled hook) is concluded by a
task, which settles it exactly as `Attempt.conclude` says.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from durajobs._values.records import ClaimedJob
from durajobs.declare.registry import Registry
from durajobs.errors import DurajobsError
from durajobs.observe.metrics import WorkerMetrics
from durajobs.observe.tracing import job_span, spans_active
from durajobs.runtime.attempt import Attempt, Body, JobExecution, Outcome
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.lease import HeldLease, LeaseRenewer
from durajobs.runtime.settler import Settler

log = logging.getLogger(__name__)

LOCAL_TIMER_HORIZON = timedelta(minutes=1)
LOCAL_TIMER_MARGIN = 0.05  # seconds
SETTLE_POLL = 0.1  # seconds between looks at a drain's budget while attempts finish


class _Held:
    """An attempt the runner holds, from its start to its settle (or abandonment). Its bound
    methods are the attempt's callbacks: no closure is made per attempt. Nothing it refers to
    refers back to it once the attempt is closed, so an attempt leaves no cycle for the
    collector (the lease is an object of its own: the attempt holds it too)."""

    __slots__ = (
        "attempt",
        "body",
        "deciding",
        "lease",
        "loop",
        "released",
        "row",
        "runner",
        "signal",
        "task",
    )

    def __init__(
        self,
        runner: AttemptRunner,
        row: ClaimedJob,
        signal: CancelSignal,
        lease: HeldLease,
        attempt: Attempt,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.runner = runner
        self.row = row
        self.signal = signal
        self.lease = lease
        self.attempt = attempt
        self.loop = loop
        self.body: Body | None = None
        self.task: asyncio.Task[None] | None = None  # the task concluding it, if any
        self.released = False  # its slot given back
        self.deciding = False  # the verdict has begun: a second trigger is ignored

    def ended(self, _future: asyncio.Future[Any]) -> None:
        """The body's future is done."""
        self.runner._release(self)
        self.runner._decide(self)

    def signalled(self, _reason: DurajobsError) -> None:
        """The signal was set (maybe on another thread): stop the body, then decide."""
        self.loop.call_soon_threadsafe(self._stop_body)

    def _stop_body(self) -> None:
        body = self.body
        if body is not None and body.future is not None:
            body.future.cancel()
        self.runner._decide(self)

    def acked(self, landed: bool, failure: BaseException | None) -> None:
        """The settler answered this attempt's ack."""
        try:
            self.runner._count(self.row, self.attempt.acked(landed, failure), batched=True)
        finally:
            self.runner._close(self)


class AttemptRunner:
    """Runs the attempts of one worker; `start` each claimed row, `settle_held` to wait."""

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
        self._on_slot_freed = on_slot_freed
        # the jobs whose running rows hold a place under a declared limit: a lost lease of one
        # is a lost place (X_JOB_SLOT_LOST)
        self._limited = frozenset(
            job.name for job in registry.jobs() if job.concurrency is not None
        )
        self.executor: Executor | None = None  # plain def bodies run here (set by the worker)
        # keyed by the attempt itself (a UUID's hash is a Python call); ids() lists their rows
        self.running: dict[_Held, None] = {}
        self.per_queue: Counter[str] = Counter()
        # slots are taken while a body runs, not while its settle is on the wire: the next
        # claim overlaps the acks of the batch before
        self.taken = 0
        self.outcomes: Counter[str] = Counter()
        # outcomes of acks answered in a batch, not yet added to the metrics: a Prometheus
        # increment costs more than the rest of an ack's bookkeeping, so a batch adds once
        self._unreported: Counter[tuple[str, str]] = Counter()
        self.abandoned_ids: set[UUID] = set()  # their bodies may still run: never given back
        self._emptied: asyncio.Event | None = None

    def ids(self) -> list[UUID]:
        """The ids of the rows held now."""
        return [held.row.id for held in self.running]

    # -- starting ----------------------------------------------------------------------------

    def start_all(self, rows: list[ClaimedJob], asked: float) -> None:
        """Start claimed rows; `asked` is when their claim was sent (their leases run from it)."""
        # asked once a batch: whether an attempt gets a span of its own, and the loop (asking
        # asyncio for it is a system call)
        traced = spans_active()
        loop = asyncio.get_running_loop()
        for row in rows:
            self.start(row, asked, traced=traced, loop=loop)
        self._leases.batch_held()

    def start(
        self, row: ClaimedJob, asked: float, *, traced: bool, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Start one claimed row; `traced`: whether an attempt gets a span of its own."""
        signal = CancelSignal()
        lease = self._leases.hold(row, signal, since=asked, limited=row.name in self._limited)
        attempt = Attempt(
            row,
            self._registry,
            db=self._db,
            signal=signal,
            lease=lease,
            settler=self._settler,
            loop=loop,
        )
        held = _Held(self, row, signal, lease, attempt, loop)
        self.running[held] = None
        self.taken += 1
        self.per_queue[row.queue] += 1
        job = attempt.job
        if job is not None and job.is_async and attempt.startable_now and not traced:
            self._start_now(held)
        else:
            held.task = held.loop.create_task(self._run(held))

    def _start_now(self, held: _Held) -> None:
        """An async body that needs no read first starts here, and is decided from a callback
        when it ends or its signal is set."""
        body = held.body = held.attempt.start({}, executor=self.executor, cancel_on_signal=False)
        if body.future is None:
            self._release(held)
            self._decide(held)  # the input did not parse: the verdict is a failure
            return
        body.future.add_done_callback(held.ended)
        # the signal may be set from the lease renewer or a body's thread
        held.signal.on_cancel(held.signalled)

    def _decide(self, held: _Held) -> None:
        if held.deciding:
            return
        held.deciding = True
        body = held.body
        assert body is not None
        if not held.attempt.settle_soon(body, held.acked):
            held.task = held.loop.create_task(self._conclude(held, body))

    async def _conclude(self, held: _Held, body: Body) -> None:
        try:
            self._record(held, await held.attempt.conclude(await body.ending()))
        except Exception as failure:
            log.error(
                "jobs.worker.attempt-crashed", extra={"id": str(held.row.id), "error": str(failure)}
            )
        finally:
            self._close(held)

    async def _run(self, held: _Held) -> None:
        """The attempts that start in a task: a history to read first, a plain def body, a span
        to run in, or a job this deploy does not know."""
        row = held.row
        lingering: list[asyncio.Future[Any]] = []
        try:
            with job_span(row):
                execution = await held.attempt.run(
                    executor=self.executor,
                    on_lingering=lingering.append,
                    on_body_done=lambda: self._release(held),
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
            log.debug(
                "jobs.attempt.ended",
                extra={"job": row.name, "id": str(row.id), "outcome": str(outcome)},
            )

    def report_batch(self) -> None:
        """Add the outcomes of the acks answered since the last call to the metrics (the
        settler calls it once it has answered a batch)."""
        unreported, self._unreported = self._unreported, Counter()
        for (queue, outcome), count in unreported.items():
            self._metrics.observe(queue, outcome, count)

    def _record(self, held: _Held, execution: JobExecution) -> None:
        self._count(held.row, execution.outcome)
        if execution.resume_at is not None:
            delay = execution.resume_at - datetime.now(UTC)
            if delay <= LOCAL_TIMER_HORIZON:
                # a little after the due time: a kick that comes early finds nothing and leaves
                # the row to the poll
                asyncio.get_running_loop().call_later(
                    max(delay.total_seconds(), 0) + LOCAL_TIMER_MARGIN, self._on_slot_freed
                )

    def _release(self, held: _Held) -> None:
        """Free the attempt's slot: when its body ends, or at the latest when it is closed."""
        if held.released:
            return
        held.released = True
        self.taken -= 1
        self.per_queue[held.row.queue] -= 1
        self._on_slot_freed()  # a freed slot refills at once

    def _close(self, held: _Held) -> None:
        held.lease.stop()
        held.signal.forget_callbacks()
        removed = self.running.pop(held, False) is None
        if removed and not self.running and self._emptied is not None:
            self._emptied.set()
        self._release(held)  # a body that never ran (or never ended) holds its slot until here

    # -- draining ----------------------------------------------------------------------------

    def cancel_all(self, reason: Callable[[ClaimedJob], DurajobsError]) -> None:
        """Set the signal of every held attempt, each with its own reason."""
        for held in list(self.running):
            held.signal.cancel(reason(held.row))

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
            self.abandoned_ids.add(entry.row.id)
            if entry.task is not None:
                entry.task.cancel()
                carriers.append(entry.task)
        self.running.clear()
        await asyncio.gather(*carriers, return_exceptions=True)
        return len(held)
