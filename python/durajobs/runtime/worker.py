"""The asyncio worker: claims batches fairly across queues, runs each attempt under a kept lease,
and drains on SIGTERM without counting the attempts it interrupts.

Three parts do the work: the claim loop (runtime/claimer.py), the attempt runner
(runtime/runner.py) and the settler (runtime/settler.py); the lease renewer, the wake and the
registry row run beside them. This module owns their lifecycle: start, stop, drain, teardown.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal as signals
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs._values.counts import parse_count
from durajobs._values.durations import Duration, parse_duration
from durajobs._values.states import DeclareOutcome
from durajobs.declare.catalogue import deploy_label
from durajobs.declare.limits import LIMIT_FIELDS
from durajobs.declare.registry import Registry
from durajobs.errors import (
    ConfigInvalid,
    Draining,
    JobConcurrencyUnenforceable,
    JobDeclarationConflict,
)
from durajobs.observe.health import Readiness, judge
from durajobs.observe.metrics import WorkerMetrics
from durajobs.runtime._asyncio import CancelWatch, Spawn, Supervisor, spawn_loose
from durajobs.runtime.attempt import Outcome
from durajobs.runtime.claimer import ClaimLoop, Pacing
from durajobs.runtime.lease import LeaseRenewer
from durajobs.runtime.presence import WorkerRegistration
from durajobs.runtime.runner import AttemptRunner
from durajobs.runtime.settler import Settler
from durajobs.runtime.upkeep import HotTableUpkeep
from durajobs.runtime.wake import QueueWake

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 8
DEFAULT_VISIBILITY = timedelta(seconds=30)
POLL_FLOOR = timedelta(milliseconds=250)
IDLE_CEILING = timedelta(seconds=2)
# with a proven wake the poll is only the fallback: 6 claims and 4 registry renewals a minute
WOKEN_IDLE_CEILING = timedelta(seconds=10)
DRAIN_DEADLINE = timedelta(seconds=25)
# /readyz fails when the database, the claim loop or the wake has been silent this long: three
# of the longest idle waits, so an idle worker with a proven wake stays ready
READY_WITHIN = timedelta(seconds=30)
# with freeze_gc: allocations between two passes of the collector's young generation
GC_YOUNG_THRESHOLD = 50_000


@dataclass
class WorkerStats:
    in_flight: int
    max_in_flight: int | None
    completed: int
    interrupted: int
    outcomes: dict[str, int]


class Worker:
    """Runs the jobs of `registry` from `queues` until stopped or drained."""

    def __init__(
        self,
        registry: Registry,
        database_url: str,
        *,
        queues: list[str] | None = None,
        concurrency: int | Mapping[str, int] = DEFAULT_CONCURRENCY,
        max_in_flight: int | None = None,
        visibility: Duration = DEFAULT_VISIBILITY,
        drain_deadline: Duration = DRAIN_DEADLINE,
        listen: bool = True,
        worker_id: str | None = None,
        poll_floor: Duration = POLL_FLOOR,
        idle_ceiling: Duration = IDLE_CEILING,
        woken_idle_ceiling: Duration = WOKEN_IDLE_CEILING,
        metrics_port: int | None = None,
        metrics_host: str = "0.0.0.0",
        freeze_gc: bool = False,
        ready_within: Duration = READY_WITHIN,
        vacuum_hot_table: bool = True,
    ) -> None:
        self.registry = registry
        self.queues = list(queues or registry.queues())
        if not self.queues:
            raise ConfigInvalid(
                "the worker serves no queue: declare a job or pass queues",
                detail={"field": "queues"},
            )
        if isinstance(concurrency, Mapping):
            # read by own key: a queue named 'keys' or '__class__' gets its own value
            self.concurrency = {
                queue: parse_count(concurrency[queue], field=f"concurrency[{queue!r}]")
                if queue in concurrency
                else DEFAULT_CONCURRENCY
                for queue in self.queues
            }
        else:
            slots = parse_count(concurrency, field="concurrency")
            self.concurrency = dict.fromkeys(self.queues, slots)
        self.max_in_flight = (
            None if max_in_flight is None else parse_count(max_in_flight, field="max_in_flight")
        )
        self.visibility = parse_duration(visibility, field="visibility")
        self.drain_deadline = parse_duration(drain_deadline, field="drain_deadline")
        self.poll_floor = parse_duration(poll_floor, field="poll_floor")
        self.idle_ceiling = parse_duration(idle_ceiling, field="idle_ceiling")
        self.woken_idle_ceiling = parse_duration(woken_idle_ceiling, field="woken_idle_ceiling")
        self.ready_within = parse_duration(ready_within, field="ready_within")
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # claims, step writes and nacks share it: enough for every slot to be busy. A call
        # waits a third of the lease for a connection at most: one stuck longer would let
        # leases lapse while it waited
        self.db = AsyncDatabase(
            database_url,
            max_size=min(max(self.capacity + 2, 4), 20),
            wait_timeout=max(self.visibility.total_seconds() / 3, 1.0),
        )
        # the lease renewals, the acks and the nacks have connections of their own: a finished
        # attempt's settle or a renewal never queues behind claims and step writes when
        # connections are scarce (after a burst of terminated backends, the pool regrowing)
        self.settle_db = AsyncDatabase(
            database_url,
            max_size=3,
            wait_timeout=max(self.visibility.total_seconds() / 3, 1.0),
        )
        # one renewal statement a round for every held attempt; the call is looked up each
        # time, so a test may stand in for the database
        self._leases = LeaseRenewer(
            lambda call: self.settle_db.run(call), self.worker_id, visibility=self.visibility
        )
        self._listen = listen
        self._wake: QueueWake | None = None
        self._spawn: Spawn = spawn_loose  # how a part starts: under run()'s supervisor
        # time.monotonic() of the drain (None before one): where its deadline starts
        self._drain_began: float | None = None
        self.abandoned = 0  # attempts left to their lease at the drain deadline
        self._stopped = asyncio.Event()
        self._teardown: asyncio.Future[None] | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None  # the loop run() runs on
        self._registered = False
        self.registration = WorkerRegistration(
            self.db,
            self.worker_id,
            queues=self.queues,
            slots=self.capacity,
            ttl=self.visibility,
            in_flight=lambda: self._runner.ids(),
        )
        self.metrics = WorkerMetrics(
            database_url,
            self.queues,
            in_flight=lambda: len(self._runner.running),
            capacity=lambda: self.capacity,
        )
        # a batch leaving for the database frees the slots its settles held
        self._settler = Settler(
            self.settle_db,
            self.worker_id,
            on_sent=self.kick,
            on_answered=lambda: self._runner.report_batch(),
        )
        self._runner = AttemptRunner(
            registry,
            db=self.db,
            settler=self._settler,
            leases=self._leases,
            metrics=self.metrics,
            worker_id=self.worker_id,
            on_slot_freed=self.kick,
        )
        # a vacuum of jobs.jobs_live when a claim shows dead entries slowing it
        self.upkeep = HotTableUpkeep(database_url, enabled=vacuum_hot_table)
        self._claims = ClaimLoop(
            registry,
            db=self.db,
            worker_id=self.worker_id,
            queues=self.queues,
            concurrency=self.concurrency,
            capacity=self.capacity,
            visibility=self.visibility,
            runner=self._runner,
            settler=self._settler,
            metrics=self.metrics,
            pacing=Pacing(self.poll_floor, self.idle_ceiling, self.woken_idle_ceiling),
            wake_proven=lambda: self._wake is not None and self._wake.proven,
            upkeep=self.upkeep,
        )
        self._runner.on_slot_freed = self._claims.kick  # the same as self.kick, one call less
        self._metrics_port = metrics_port
        self._metrics_host = metrics_host
        self._freeze_gc = freeze_gc

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        slots = sum(self.concurrency.values())
        return slots if self.max_in_flight is None else min(slots, self.max_in_flight)

    def stats(self) -> WorkerStats:
        return WorkerStats(
            in_flight=len(self._runner.running),
            max_in_flight=self.max_in_flight,
            completed=self._runner.outcomes[Outcome.COMPLETED],
            interrupted=self._runner.outcomes[Outcome.INTERRUPTED],
            outcomes=dict(self._runner.outcomes),
        )

    def readiness(self) -> Readiness:
        """What /readyz answers: not draining, the database answering, the claim loop passing
        (or every slot busy), the wake listening; each within `ready_within`. Safe to call from
        another thread (it only reads)."""
        return judge(
            now=time.monotonic(),
            within=self.ready_within.total_seconds(),
            accepting=self._claims.accepting,
            last_answer=self.db.last_answer,
            last_pass=self._claims.last_pass,
            at_capacity=self._claims.room() == 0,
            listening=self._listen,
            wake_down_since=None if self._wake is None else self._wake.down_since,
        )

    def kick(self, _queue: str | None = None) -> None:
        """Start a claim pass now (a wake, a freed slot, a timer)."""
        self._claims.kick()

    def drain(self) -> None:
        """SIGTERM: stop claiming and cancel every held attempt with X_DRAINING, at once.

        Also after `stop()`: a shutdown arriving while held work finishes bounds the wait.
        Safe to call from any thread (a signal.signal handler, a web server's shutdown hook).
        """
        if self._hop_to_loop(self.drain):
            return
        if self._drain_began is not None:
            return
        self._drain_began = time.monotonic()
        self._claims.stop()
        if self._registered and self._teardown is None:
            self._claims.background(self.registration.mark_draining())
        log.info(
            "jobs.worker.draining",
            extra={"worker": self.worker_id, "held": len(self._runner.running)},
        )
        self._runner.cancel_all(
            lambda row: Draining(
                f"worker {self.worker_id} is draining",
                detail={"worker": self.worker_id, "id": str(row.id)},
            )
        )

    def drain_time_left(self) -> float | None:
        """Seconds left of the drain's budget (0 once spent); None before any drain."""
        if self._drain_began is None:
            return None
        spent = time.monotonic() - self._drain_began
        return max(self.drain_deadline.total_seconds() - spent, 0.0)

    def stop(self) -> None:
        """Stop claiming and let held work finish, with no deadline and no cancel.

        Safe to call from any thread."""
        if self._hop_to_loop(self.stop):
            return
        self._claims.stop()

    def _hop_to_loop(self, method: Callable[[], None]) -> bool:
        """Called off the thread running this worker: schedule `method` on its loop instead
        (asyncio's events and tasks are not thread-safe) and answer True."""
        loop = self._event_loop
        if loop is None or loop.is_closed():
            return False
        try:
            if asyncio.get_running_loop() is loop:
                return False
        except RuntimeError:
            pass  # no loop runs on this thread
        loop.call_soon_threadsafe(method)
        return True

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Run until `stop()` or `drain()`; the drain waits at most `drain_deadline`."""
        loop = self._event_loop = asyncio.get_running_loop()
        # the pool's wait for a connection can drop a cancel (durajobs.runtime._asyncio): the
        # claim loop checks this, or the task running the worker claims on until the next cancel
        cancel = CancelWatch()
        # plain def handlers get a thread per slot, on a pool of the worker's own
        executor = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="durajobs-job")
        self._runner.executor = executor
        if install_signal_handlers:
            for number in (signals.SIGTERM, signals.SIGINT):
                loop.add_signal_handler(number, self.drain)
        # the long-lived parts run in this group, so none outlives run(); the first that
        # fails drains the worker as SIGTERM would, and run() raises its error at the end
        supervisor: Supervisor | None = None
        try:
            async with asyncio.TaskGroup() as group:
                supervisor = Supervisor(group, self.worker_id, on_failure=self.drain)
                self._supervise(supervisor)
                await self._run_supervised(cancel, executor, install_signal_handlers)
        except BaseExceptionGroup as failed:
            # the run's own error, wrapped by the group: raised as itself, so a caller catches
            # the exception it knows rather than a group
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
        if supervisor is not None and supervisor.failure is not None:
            raise supervisor.failure

    def _supervise(self, supervisor: Supervisor) -> None:
        """Start the long-lived parts under `supervisor` from now on."""
        self._spawn = supervisor.spawn
        self._leases.spawn = supervisor.spawn
        self.registration.spawn = supervisor.spawn
        self.upkeep.spawn = supervisor.spawn

    async def _run_supervised(
        self, cancel: CancelWatch, executor: ThreadPoolExecutor, install_signal_handlers: bool
    ) -> None:
        """Open, announce, claim until stopped or cancelled, then give back what was taken."""
        loop = asyncio.get_running_loop()
        try:
            await self.db.open()
            await self.settle_db.open()
            self.metrics.join()
            if self._metrics_port is not None:
                self.metrics.serve(self._metrics_port, self._metrics_host, self.readiness)
            # before the announce: a cancel landing after its row was written but before its
            # answer came back must still forget the row
            self._registered = True
            await self.registration.start()
            await self._declare_jobs()
            if self._freeze_gc:
                # a process of its own: what is alive now (modules, the registry, the pool)
                # lives as long as the process, so the collector need never walk it again
                gc.collect()
                gc.freeze()
                # hundreds of attempts are alive at once under load, and a young-generation
                # pass walks all of them: every 700 allocations (the default) it cost about a
                # tenth of the worker's CPU in the burn-down
                gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
            for queue in self.queues:
                if queue not in self.registry.queues():
                    log.info("jobs.worker.queue-unregistered", extra={"queue": queue})
            if self._listen:
                tokens = await self.db.run(calls.wake_tokens(self.queues))
                self._wake = QueueWake(
                    self.db.database_url,
                    tokens,
                    self._claims.kick,  # the same as self.kick, one call less
                    lambda token: self.db.run(calls.wake_probe(token)),
                )
                self._wake.start(self._spawn)
            log.info(
                "jobs.worker.started",
                extra={
                    "worker": self.worker_id,
                    "queues": self.queues,
                    # 'uvloop' or 'asyncio': which loop the process runs on
                    "loop": type(loop).__module__.split(".")[0],
                },
            )
            try:
                await self._claims.run(cancel)
            except asyncio.CancelledError:
                # the task running the worker was cancelled (a TaskGroup, a timeout, Ctrl-C
                # under asyncio.run): drain as SIGTERM would, or held attempts would run on
                # past a closed pool and come back only when their leases lapse, each counted
                self.drain()
                if self._claims.claim_cut:
                    # at once, not after the held attempts: rows waiting on a drain's full
                    # budget could lapse into another worker's counted attempts meanwhile
                    await self._claims.give_back_unknown_rows(self.drain_time_left())
                await self._settle_held()
                raise
            await self._settle_held()
            await self._claims.finish_chores(self.drain_time_left())
        finally:
            if install_signal_handlers:
                for number in (signals.SIGTERM, signals.SIGINT):
                    loop.remove_signal_handler(number)
            # shielded: a second cancel returns at once, but the registry row is still
            # forgotten (its renewals would keep a dead worker listed) and the pool closed
            self._teardown = asyncio.ensure_future(self._close_resources(executor))
            await asyncio.shield(self._teardown)

    async def _close_resources(self, executor: ThreadPoolExecutor) -> None:
        """Give back what run() took: the rows of a cut claim, the wake, the registry row, the
        metrics port, the pool."""
        try:
            if self._claims.claim_cut:
                await self._claims.give_back_unknown_rows(self.drain_time_left())
            if self._wake is not None:
                await self._wake.stop()
            if self._registered:
                await self.registration.stop()
                self._registered = False
        finally:
            await self.upkeep.close()
            await self._leases.close()
            self.metrics.leave()
            self.metrics.close()
            await self.settle_db.close()
            await self.db.close()
            executor.shutdown(wait=False, cancel_futures=True)
            self._stopped.set()
            log.info("jobs.worker.stopped", extra={"worker": self.worker_id})

    async def _settle_held(self) -> None:
        """Wait for held attempts: without limit after stop(), up to the deadline once draining."""
        self.abandoned = await self._runner.settle_held(self.drain_time_left)

    async def _declare_jobs(self) -> None:
        """Put this deploy's declarations in the catalogue, so an enqueue from SQL gets them. A
        name another deploy declared differently keeps the stored one (old and new code both run
        during a rolling deploy) and is logged; a failure is logged too: the worker runs on.

        Raises X_JOB_CONCURRENCY_UNENFORCEABLE when a job here declares a concurrency limit the
        stored declaration does not hold: the claim enforces the stored one, so this worker's
        limit would do nothing (R30)."""
        declared_by = deploy_label(self.worker_id)
        unenforced: dict[str, Any] = {}
        try:
            if self.registry.redact:
                await self.db.run(calls.redact_keys(self.registry.redact))
            for job in self.registry.jobs():
                answer = await self.db.run(job.declaration(declared_by=declared_by))
                if answer.outcome is DeclareOutcome.CONFLICT:
                    log.warning(
                        "jobs.catalogue.conflict",
                        extra={
                            "job": answer.name,
                            "differences": answer.differences,
                            "stored_by": answer.stored_by,
                            "fix": JobDeclarationConflict.fix,
                        },
                    )
                    differences = answer.differences or {}
                    if job.concurrency is not None and LIMIT_FIELDS & differences.keys():
                        unenforced[answer.name] = differences
        except Exception as failure:
            log.error("jobs.catalogue.failed", extra={"error": repr(failure)})
        if unenforced:
            raise JobConcurrencyUnenforceable(
                f"the catalogue holds other concurrency limits than this worker declares for "
                f"{', '.join(sorted(unenforced))}; the claim enforces the stored ones",
                detail={"jobs": unenforced},
            )
