"""The claim loop: claims batches fairly across queues and hands their rows to the runner.

It re-arms on each claim PASS, never on the jobs, so a long job never blocks free slots. Idle,
it backs off from the poll floor (250 ms) to the idle ceiling (2 s; 10 s once the wake is
proven); a wake, a freed slot or a local timer starts a pass at once. A claim asks for at most
MAX_CLAIM rows; after a full batch, the next claim is sent while its rows are started, their
slots already counted as taken. Queues are visited in turn, each pass starting after the queue
the last one ended on.

A busy pass splits its room across the queues with a free slot: each is asked for an even share
of what is left, a queue with less work leaves the rest to the queues after it, and the queues
that filled their share are asked again while room is left, so a pass leaves no slot idle that
some queue has work for. A claim's slots are spoken for from the moment it is sent: a pass and
the claim sent ahead of it run at once, and neither may take the room the other asked for.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from operator import attrgetter
from typing import Any

from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs._values.records import ClaimedJob
from durajobs._values.states import JobState
from durajobs.declare.registry import Registry, Settled
from durajobs.errors import JobKeyBusy
from durajobs.observe.metrics import WorkerMetrics
from durajobs.runtime._asyncio import CancelWatch
from durajobs.runtime.attempt import Outcome, notify_settled
from durajobs.runtime.runner import AttemptRunner
from durajobs.runtime.settler import Settler
from durajobs.runtime.upkeep import HotTableUpkeep

log = logging.getLogger(__name__)

# how often a queue's claim also buries and re-takes lapsed leases: their scan steps over every
# dead entry of the lease index, so a busy worker does it once a second rather than every claim
LAPSED_SCAN_INTERVAL = 1.0  # seconds
# the most rows one claim statement asks for: with more slots than this, the next claim is sent
# while the rows of the last are started, and the pipe stays full
MAX_CLAIM = 500
# claim statements kept written (one per set of queues a claim names, in order)
MAX_KEPT_STATEMENTS = 256

RUNNING = JobState.RUNNING
_queue_of = attrgetter("queue")


@dataclass(frozen=True)
class Pacing:
    """How long an idle claim loop waits between passes."""

    poll_floor: timedelta
    idle_ceiling: timedelta
    woken_idle_ceiling: timedelta  # once the wake is proven, the poll is only the fallback


class ClaimLoop:
    """Claims for one worker until stopped; the worker owns the lifecycle around it."""

    def __init__(
        self,
        registry: Registry,
        *,
        db: AsyncDatabase,
        worker_id: str,
        queues: list[str],
        concurrency: dict[str, int],
        capacity: int,
        visibility: timedelta,
        runner: AttemptRunner,
        settler: Settler,
        metrics: WorkerMetrics,
        pacing: Pacing,
        wake_proven: Callable[[], bool],
        upkeep: HotTableUpkeep,
    ) -> None:
        self._registry = registry
        self._db = db
        self._worker_id = worker_id
        self._queues = queues
        self._concurrency = concurrency
        self._capacity = capacity
        self._visibility = visibility
        self._runner = runner
        self._settler = settler
        self._metrics = metrics
        self._pacing = pacing
        self._wake_proven = wake_proven
        self._upkeep = upkeep
        self.accepting = True
        self.last_pass: float | None = None  # when the loop last finished a pass
        # a claim whose wait a cancel cut: its statement may have committed with the answer
        # thrown away, so the teardown asks which rows this worker holds without knowing
        self.claim_cut = False
        self._kick = asyncio.Event()
        self._rotation = 0
        # rows claimed but not yet started, by queue: their slots are spoken for
        self._reserved: Counter[str] = Counter()
        # claims on the wire: the slots they asked for, in all and for each queue they name
        self._asking = 0
        self._asking_by_queue: Counter[str] = Counter()
        # the next pass, sent while the rows of the last one are started
        self._ahead: asyncio.Task[int] | None = None
        self._lapsed_scanned: dict[str, float] = {}  # queue -> when its lapsed leases were sought
        self._idle = True
        # the pass about to run was started by a kick while idle: a pickup, whose claim leaves
        # the lapsed-lease scan to the claim after it (the scan is most of a slow pickup)
        self._woken = False
        # a pickup left a due lapsed-lease scan to the next claim: it is sent at once
        self._scan_owed = False
        # the claim statements met so far, by (queues, jobs to drop)
        self._statements: dict[tuple[tuple[str, ...], tuple[str, ...]], calls.WorkerClaim] = {}
        # the on_settled hooks of buried rows, and other work the loop leaves running
        self._chores: set[asyncio.Task[None]] = set()

    def kick(self, _queue: str | None = None) -> None:
        """Start a pass now (a wake of `_queue`, a freed slot, a timer)."""
        self._kick.set()

    def stop(self) -> None:
        """Claim no more; a claim in flight hands its rows back uncounted."""
        self.accepting = False
        self._kick.set()

    async def run(self, cancel: CancelWatch) -> None:
        """Claim until stop(); a claim sent ahead is handed back or cut with the loop."""
        try:
            await self._claim_until_stopped(cancel)
        except BaseException:
            # a claim sent ahead and still on the wire is cut with the loop: the teardown asks
            # the database for the rows it may have taken (its cancel marks the claim cut)
            if self._ahead is not None:
                self._ahead.cancel()
            raise
        finally:
            if self._ahead is not None:
                # after stop() or a drain, its rows are handed back uncounted when it returns
                ahead, self._ahead = self._ahead, None
                await asyncio.gather(ahead, return_exceptions=True)

    async def _claim_until_stopped(self, cancel: CancelWatch) -> None:
        wait = self._pacing.poll_floor
        while self.accepting:
            cancel.check()
            self._kick.clear()
            self._scan_owed = False  # owed by this pass's pickup, if it skips a due scan
            try:
                claimed = await self._pass()
                # a claim sent ahead keeps the pipe full: each may send the next
                while self._ahead is not None:
                    ahead, self._ahead = self._ahead, None
                    claimed += await ahead
                self.last_pass = time.monotonic()
            except Exception as failure:
                # a failed pass never kills the loop: re-arm at the floor
                log.error("jobs.worker.claim-failed", extra={"error": str(failure)})
                claimed, wait = 0, self._pacing.poll_floor
            cancel.check()
            if not self.accepting:
                break
            timeout: float | None
            if claimed:
                wait = self._pacing.poll_floor
                if self.room() > 0:
                    # the bodies just started take their first step before the next claim is
                    # sent: a pickup does not wait for a claim that finds nothing
                    await asyncio.sleep(0)
                    continue
                timeout = None  # at the cap: a freed slot kicks
            elif self.room() == 0:
                timeout = None
            elif self._scan_owed:
                # a pickup that found nothing still owes the scan it skipped: the next pass,
                # not woken, sends it (and never owes one, so this cannot loop)
                await asyncio.sleep(0)
                continue
            else:
                timeout = wait.total_seconds()
                log.debug("jobs.worker.idle", extra={"worker": self._worker_id, "wait": timeout})
                proven = self._wake_proven()
                ceiling = self._pacing.woken_idle_ceiling if proven else self._pacing.idle_ceiling
                wait = min(wait * 2, ceiling)
            try:
                async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancel
                    await self._kick.wait()
                wait = self._pacing.poll_floor
                self._woken = self._idle
            except TimeoutError:
                self._woken = False

    def room(self) -> int:
        """Slots free for a claim now."""
        # a finished attempt whose settle waits for a statement still holds its slot, and a
        # claimed row not yet started has its slot already
        # sum(values()), not Counter.total() nor a missing key's Counter.__missing__: a Python
        # call less each, on the way from an idle worker's wake to its claim
        reserved = sum(self._reserved.values())
        taken = self._runner.taken + self._settler.queued + reserved + self._asking
        return max(self._capacity - taken, 0)

    def _queue_room(self, queue: str) -> int:
        taken = (
            self._runner.per_queue.get(queue, 0)
            + self._reserved.get(queue, 0)
            + self._asking_by_queue.get(queue, 0)
        )
        return max(self._concurrency[queue] - taken, 0)

    async def _pass(self) -> int:
        room = self.room()
        if room == 0:
            return 0
        rotated = self._queues[self._rotation :] + self._queues[: self._rotation]
        open_queues = [q for q in rotated if self._queue_room(q) > 0]
        if not open_queues:
            return 0
        if self._idle:
            # a first fill from idle: one statement over every queue with a free slot
            size = min(room, MAX_CLAIM, min(self._queue_room(q) for q in open_queues))
            pickup, self._woken = self._woken, False
            got = await self._claim(open_queues, size, pickup=pickup)
        else:
            got = await self._split(open_queues, min(room, MAX_CLAIM))
        self._idle = got == 0
        return got

    async def _split(self, queues: list[str], budget: int) -> int:
        """Claim up to `budget` rows from `queues` in turn, each asked for an even share of the
        room left; the queues that filled their share are asked again while room is left (3
        queues, room 5, work 10, 1, 1: 2, 1, 1, then 1 more from the first). Answer how many
        started."""
        got = 0
        while queues:
            filled = []
            for index, queue in enumerate(queues):
                # read again before each claim: a claim sent ahead may have taken room since
                left = min(self.room(), budget - got)
                if left <= 0:
                    return got
                share = min(math.ceil(left / (len(queues) - index)), self._queue_room(queue))
                if share <= 0:
                    continue
                taken = await self._claim([queue], share)
                got += taken
                if taken == share:
                    filled.append(queue)
            queues = filled
        return got

    async def _claim(self, queues: list[str], size: int, *, pickup: bool = False) -> int:
        """Claim up to `size` rows of `queues` and start them; answer how many started. A
        `pickup` (the first claim after a wake) never scans for lapsed leases: that scan steps
        over every dead entry of the lease index (milliseconds where a pickup takes one), and the
        claim the loop sends right after a pickup's rows does it instead. The caller sizes the
        claim from room() and _queue_room() with no await since: so no other claim has taken
        room since, and the slots are spoken for below before this coroutine first waits."""
        if size <= 0 or not self.accepting:
            return 0
        dropping = self._registry.dropped_when_exhausted()
        asked = time.monotonic()  # the lease runs from the claim, not from the attempt's start
        recover = any(
            asked - self._lapsed_scanned.get(queue, -math.inf) >= LAPSED_SCAN_INTERVAL
            for queue in queues
        )
        self._scan_owed = recover and pickup
        recover = recover and not pickup
        try:
            # spoken for while on the wire: a multi-queue claim may take all of them from any
            # one of its queues
            self._asking += size
            for queue in queues:
                self._asking_by_queue[queue] += size
            try:
                statement = self._statement(queues, dropping)
                rows = await self._db.run(statement(size, recover_lapsed=recover))
            finally:
                # no await between here and _take reserving the rows: the slots never read free
                self._asking -= size
                for queue in queues:
                    self._asking_by_queue[queue] -= size
            if recover and _lapsed_exhausted(rows, size):
                self._lapsed_scanned.update(dict.fromkeys(queues, asked))
            # inside the try: a cancel among the hand-backs of a drain leaves rows unknown too
            started = await self._take(rows, asked, full=len(rows) >= size)
            # the queue ran dry: a moment to look at the dead entries every claim steps over
            # (after the rows are started: a pickup's body does not wait for it)
            self._upkeep.observe(size, len(rows))
            return started
        except asyncio.CancelledError:
            # psycopg answers a cancel by cancelling the statement, and raises even when it had
            # already committed: the rows would stay running until their leases lapse, each a
            # counted attempt. Not shielded (a task per claim cost about a tenth of the
            # burn-down): the teardown asks for them instead
            self.claim_cut = True
            raise

    async def _hand_back(self, rows: list[ClaimedJob]) -> None:
        """Give claimed rows that will not start back, uncounted. A nack that fails leaves its
        row to the teardown's look for rows this worker holds but never started (claim_cut),
        not to its lease, which would count an attempt that never ran."""
        for row in rows:
            try:
                await self._db.run(calls.nack(row.fence, counts_as_attempt=False))
            except Exception as failure:
                self.claim_cut = True
                log.error("jobs.settle.failed", extra={"id": str(row.id), "error": str(failure)})

    def _statement(self, queues: list[str], dropping: tuple[str, ...]) -> calls.WorkerClaim:
        """The claim statement of these queues and jobs to drop, written once and kept."""
        key = (tuple(queues), dropping)
        statement = self._statements.get(key)
        if statement is None:
            if len(self._statements) >= MAX_KEPT_STATEMENTS:
                self._statements.clear()  # many queues met in many orders: start again
            statement = self._statements[key] = calls.WorkerClaim(
                queues, self._worker_id, visibility=self._visibility, drop_exhausted=dropping
            )
        return statement

    async def _take(self, rows: list[ClaimedJob], asked: float, *, full: bool) -> int:
        """Start the claimed rows (or hand them back uncounted once draining) and announce the
        buried ones; answer how many started. After a `full` batch (more rows are likely
        waiting) the next claim is sent first."""
        # claimed rows start first: a slow on_settled hook of a buried row must not eat into
        # their leases
        claimed = [row for row in rows if row.state is RUNNING]  # not row.buried: no call a row
        buried = [row for row in rows if row.buried] if len(claimed) < len(rows) else []
        if not self.accepting:
            # drained while the claim was in flight: hand the rows back, uncounted
            await self._hand_back(claimed)
            claimed = []
        # a partial batch emptied the queue: a pickup starts its row at once
        if claimed and full and self._ahead is None:
            reserved = Counter(map(_queue_of, claimed))
            self._reserved += reserved
            try:
                if self.room() > 0:
                    # the database works on the next claim while this process starts these
                    # rows: sent first, it reaches the wire before they take the loop
                    self._ahead = asyncio.get_running_loop().create_task(self._pass())
                    await asyncio.sleep(0)
            finally:
                self._reserved -= reserved
            if not self.accepting:
                # drained in that turn: the drain signalled only the attempts already held,
                # so these would run unsignalled through its whole budget
                await self._hand_back(claimed)
                claimed = []
        self._runner.start_all(claimed, asked)
        if claimed and not full:
            # a pickup: its bodies take their first step now, before this pass's bookkeeping
            await asyncio.sleep(0)
        if claimed:
            last = claimed[-1].queue
            position = self._queues.index(last) if last in self._queues else -1
            self._rotation = (position + 1) % len(self._queues)
        for row in buried:
            outcome = _buried_outcome(row)
            self._metrics.observe(row.queue, outcome)
            if outcome is Outcome.REFUSED:
                self._runner.outcomes[outcome] += 1
            self.background(self._announce_exhausted(row, outcome))
        return len(claimed)

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _announce_exhausted(self, row: ClaimedJob, outcome: Outcome) -> None:
        refused = outcome is Outcome.REFUSED
        (log.warning if refused else log.error)(
            "jobs.claim.refused" if refused else "jobs.claim.exhausted",
            extra={
                "job": row.name,
                "id": str(row.id),
                "state": str(row.state),
                "attempt": row.attempt,
            },
        )
        job = self._registry.get(row.name)
        if job is None:
            return
        await notify_settled(
            job,
            Settled(
                job=row.name,
                job_id=row.id,
                run_id=row.run_id,
                outcome=str(outcome),
                attempt=row.attempt,
                error=row.last_error if refused else "LEASE_LAPSED_FINAL_ATTEMPT",
                code=JobKeyBusy.code if refused else None,
                input=row.input,
                tenant_id=row.tenant_id,
                queue=row.queue,
            ),
        )

    async def give_back_unknown_rows(self, time_left: float | None) -> None:
        """After a cut claim: hand back, uncounted, the rows this worker holds running but never
        started (within the drain's budget). Abandoned attempts keep theirs: their bodies may
        still run."""
        try:
            async with asyncio.timeout(time_left):
                held = await self._db.run(calls.worker_running(self._worker_id))
                known = set(self._runner.ids()) | self._runner.abandoned_ids
                for fence in held:
                    if fence.id in known:
                        continue
                    await self._db.run(calls.nack(fence, counts_as_attempt=False))
            self.claim_cut = False
        except Exception as failure:  # TimeoutError included: the rows lapse, as on a crash
            log.error("jobs.worker.claim-lost", extra={"error": repr(failure)})

    async def finish_chores(self, time_left: float | None) -> None:
        """Wait for the chores (the on_settled hooks of buried rows): without limit after stop(),
        within what is left of the drain's budget once draining; past it they are cancelled, so
        a slow hook cannot hold the process past the platform's grace period."""
        if not self._chores:
            return
        _done, late = await asyncio.wait(set(self._chores), timeout=time_left)
        if late:
            log.error(
                "jobs.worker.chores-abandoned",
                extra={"worker": self._worker_id, "abandoned": len(late)},
            )
            for chore in late:
                chore.cancel()
            await asyncio.gather(*late, return_exceptions=True)


def _lapsed_exhausted(rows: list[ClaimedJob], size: int) -> bool:
    """Whether a claim that scanned for lapsed leases left none behind. A burial, or a batch
    the re-taken rows may have filled, may have: the next claim looks again. A running row on
    its first attempt was waiting, not lapsed (a re-taken row has had an attempt before), and
    the claim reads the waiting rows only for the room the lapsed ones left: so a full batch
    that holds one is a burn-down's batch, and the scan can wait its interval."""
    if any(row.buried for row in rows):
        return False
    return len(rows) < size or any(row.attempt == 1 for row in rows)


def _buried_outcome(row: ClaimedJob) -> Outcome:
    """What the claim did with a row it settled itself: refused it (another run held its key),
    or buried it (its lease lapsed on the final attempt)."""
    if row.last_error is not None and row.last_error.startswith(JobKeyBusy.code):
        return Outcome.REFUSED
    return Outcome.DEAD_LETTERED if row.state == "dead" else Outcome.DROPPED
