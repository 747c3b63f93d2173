"""Typed answers of the SQL functions: frozen rows, each built by `from_row`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from durajobs._values.states import JobState, StepStatus, narrow

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The job's ids; `deduped` when an existing job answered instead of a new row."""

    id: UUID
    run_id: UUID
    deduped: bool

    @classmethod
    def from_row(cls, row: Row) -> EnqueueResult:
        return cls(id=row[0], run_id=row[1], deduped=row[2])


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A row jobs.claim_v1 answered: claimed ('running') or buried ('dead' or 'failed')."""

    id: UUID
    run_id: UUID
    name: str
    queue: str
    input: dict[str, Any]
    tenant_id: str | None
    state: JobState
    attempt: int
    max_attempts: int
    claim: int
    priority: int
    run_at: datetime
    created_at: datetime
    lease_expires_at: datetime | None
    last_error: str | None
    traceparent: str | None
    enqueued_by: str | None
    # whether the run may have stored steps: False lets the worker skip reading its history
    has_steps: bool = True

    COLUMNS = (
        "id, run_id, name, queue, input, tenant_id, state, attempt, max_attempts, claim, "
        "priority, run_at, created_at, lease_expires_at, last_error, traceparent, enqueued_by, "
        "has_steps"
    )

    @property
    def buried(self) -> bool:
        """True for a row settled by the claim because its final attempt's lease lapsed."""
        return self.state is not JobState.RUNNING

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @classmethod
    def from_row(cls, row: Row) -> ClaimedJob:
        return cls(
            id=row[0],
            run_id=row[1],
            name=row[2],
            queue=row[3],
            input=row[4],
            tenant_id=row[5],
            state=narrow(JobState, row[6], table="jobs.jobs", column="state"),
            attempt=row[7],
            max_attempts=row[8],
            claim=row[9],
            priority=row[10],
            run_at=row[11],
            created_at=row[12],
            lease_expires_at=row[13],
            last_error=row[14],
            traceparent=row[15],
            enqueued_by=row[16],
            has_steps=row[17] if len(row) > 17 else True,
        )


@dataclass(frozen=True, slots=True)
class SettleResult:
    """One answer of a batch settle: did it land on the row this attempt held?"""

    id: UUID
    landed: bool

    @classmethod
    def from_row(cls, row: Row) -> SettleResult:
        return cls(id=row[0], landed=row[1])


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A durable step of a run, as stored."""

    name: str
    status: StepStatus
    output: Any
    error: str | None
    attempts: int
    started_at: datetime
    finished_at: datetime | None
    wake_at: datetime | None

    COLUMNS = "name, status, output, error, attempts, started_at, finished_at, wake_at"

    @classmethod
    def from_row(cls, row: Row) -> StepRecord:
        return cls(
            name=row[0],
            status=narrow(StepStatus, row[1], table="jobs.steps", column="status"),
            output=row[2],
            error=row[3],
            attempts=row[4],
            started_at=row[5],
            finished_at=row[6],
            wake_at=row[7],
        )


@dataclass(frozen=True, slots=True)
class QueueStat:
    """What one queue holds; `oldest_ready_age` is how long the oldest due ready job waited."""

    queue: str
    ready: int
    delayed: int
    running: int
    suspended: int
    dead: int
    oldest_ready_age: timedelta | None
    paused: bool

    COLUMNS = "queue, ready, delayed, running, suspended, dead, oldest_ready_age, paused"

    @classmethod
    def from_row(cls, row: Row) -> QueueStat:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """A staged enqueue, as a relay claimed it."""

    id: UUID
    run_id: UUID
    staged_at: datetime
    request: dict[str, Any]
    claimed_by: str | None
    claim_expires_at: datetime | None

    COLUMNS = "id, run_id, staged_at, request, claimed_by, claim_expires_at"

    @classmethod
    def from_row(cls, row: Row) -> OutboxRecord:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class EventLookup:
    """What jobs.find_event answered, with the database's now (the one clock of a wait)."""

    found: bool
    event_id: UUID | None
    payload: Any
    published_at: datetime | None
    now: datetime

    COLUMNS = "found, event_id, payload, published_at, now"

    @classmethod
    def from_row(cls, row: Row) -> EventLookup:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class TaskState:
    """A cron task as the database holds it: its watermark, its last fire, its pause."""

    task: str
    watermark: datetime
    last_fired_occurrence: datetime | None
    last_fired_at: datetime | None
    paused: bool

    COLUMNS = "task, watermark, last_fired_occurrence, last_fired_at, paused"

    @classmethod
    def from_row(cls, row: Row) -> TaskState:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """One row of a jobs.list_jobs page."""

    id: UUID
    run_id: UUID
    name: str
    queue: str
    state: JobState
    tenant_id: str | None
    attempt: int
    max_attempts: int
    priority: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    last_error: str | None
    last_error_code: str | None

    COLUMNS = (
        "id, run_id, name, queue, state, tenant_id, attempt, max_attempts, priority, run_at, "
        "created_at, updated_at, finished_at, last_error, last_error_code"
    )

    @classmethod
    def from_row(cls, row: Row) -> JobSummary:
        values = list(row)
        values[4] = narrow(JobState, row[4], table="jobs.jobs", column="state")
        return cls(*values)


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What a bulk operator call moved, and how many rows a next call could still move."""

    affected: int
    remaining: int

    @classmethod
    def from_row(cls, row: Row) -> BulkResult:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What one jobs.purge call deleted: jobs, steps, outbox rows and events."""

    jobs: int
    steps: int
    outbox: int
    events: int

    @classmethod
    def from_row(cls, row: Row) -> PurgeResult:
        return cls(*row)

    @property
    def deleted(self) -> int:
        return self.jobs + self.steps + self.outbox + self.events

    def __add__(self, other: PurgeResult) -> PurgeResult:
        return PurgeResult(
            self.jobs + other.jobs,
            self.steps + other.steps,
            self.outbox + other.outbox,
            self.events + other.events,
        )


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One live worker of jobs.workers_live."""

    id: str
    host: str
    pid: int
    queues: list[str]
    slots: int
    in_flight: list[UUID]
    in_flight_count: int
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    draining_at: datetime | None

    COLUMNS = (
        "id, host, pid, queues, slots, in_flight, in_flight_count, started_at, heartbeat_at, "
        "expires_at, draining_at"
    )

    @classmethod
    def from_row(cls, row: Row) -> WorkerRecord:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """The autoscaler's number for one queue: running + due - held by draining workers."""

    queue: str
    running: int
    due: int
    draining_held: int
    depth: int

    COLUMNS = "queue, running, due, draining_held, depth"

    @classmethod
    def from_row(cls, row: Row) -> QueueDepth:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class CounterRow:
    """One bucket of one job name's counters (shards summed)."""

    name: str
    tier: str
    bucket: datetime
    done: int
    retried: int
    failed: int
    dead: int
    duration_ms: int

    COLUMNS = "name, tier, bucket, done, retried, failed, dead, duration_ms"

    @classmethod
    def from_row(cls, row: Row) -> CounterRow:
        return cls(*row)


@dataclass(frozen=True, slots=True)
class CounterTotal:
    """One job name's counters summed over a time range."""

    name: str
    done: int
    retried: int
    failed: int
    dead: int
    duration_ms: int

    COLUMNS = "name, done, retried, failed, dead, duration_ms"

    @classmethod
    def from_row(cls, row: Row) -> CounterTotal:
        return cls(*row)
