"""Typed answers of the SQL functions: frozen rows whose column lists come from their fields."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, Self
from uuid import UUID

from durajobs._values.states import LIVE_STATES, DeclareOutcome, JobState, StepStatus, narrow

_JOB_STATES: dict[object, JobState] = {state.value: state for state in JobState}

Row = tuple[Any, ...]
# field name -> (the StrEnum it is read into, the "table.column" a bad value is reported against)
Narrowed = dict[str, tuple[type[StrEnum], str]]


@dataclass(frozen=True, slots=True)
class Fence:
    """The right to write to one claimed row: its id, the worker that claimed it and the claim's
    token. Every write of an attempt (heartbeat, step, progress, ack, nack) carries it, and the
    SQL refuses it once a later claim took the row."""

    id: UUID
    worker_id: str
    claim: int

    def arguments(self) -> dict[str, Any]:
        """The three arguments, named as every fenced SQL function names them."""
        return {"id": self.id, "worker_id": self.worker_id, "claim": self.claim}


class Answer:
    """Base of every answer row: `COLUMNS` is its fields in order, `from_row` builds it.

    A subclass is a frozen, slotted dataclass whose fields are named and ordered as the SQL
    answer's columns. `NARROWED` maps the fields read into a StrEnum to the enum and the
    `table.column` a bad value is reported against, so an unknown state raises
    X_JOB_ROW_STATUS_UNKNOWN. `LOCAL` names trailing fields the caller supplies rather than
    the SQL (`from_row(row, *local)`).
    """

    __slots__ = ()

    COLUMNS: ClassVar[str] = ""
    # field name -> the SQL expression selected for it, where that is not the column of its name
    SELECTED: ClassVar[dict[str, str]] = {}
    NARROWED: ClassVar[Narrowed] = {}
    LOCAL: ClassVar[tuple[str, ...]] = ()
    _NARROW_AT: ClassVar[tuple[tuple[int, type[StrEnum], str, str], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the class body's own annotations, in order, are its fields (ClassVars aside)
        fields = [
            name
            for name, annotation in inspect.get_annotations(cls).items()
            if not str(annotation).startswith("ClassVar")
        ]
        if fields[len(fields) - len(cls.LOCAL) :] != list(cls.LOCAL):
            raise TypeError(f"{cls.__name__}: LOCAL must name the last fields, in order")
        cls.COLUMNS = ", ".join(
            cls.SELECTED.get(name, name) for name in fields[: len(fields) - len(cls.LOCAL)]
        )
        at = []
        for name, (kind, column) in cls.NARROWED.items():
            table, _, column_name = column.rpartition(".")
            at.append((fields.index(name), kind, table, column_name))
        cls._NARROW_AT = tuple(at)

    @classmethod
    def from_row(cls, row: Row, *local: Any) -> Self:
        if not cls._NARROW_AT:
            return cls(*row, *local)
        values = list(row)
        for index, kind, table, column in cls._NARROW_AT:
            values[index] = narrow(kind, values[index], table=table, column=column)
        return cls(*values, *local)


@dataclass(frozen=True, slots=True)
class EnqueueResult(Answer):
    """The job's ids; `deduped` when an existing job answered instead of a new row."""

    id: UUID
    run_id: UUID
    deduped: bool


@dataclass(slots=True, eq=False)
class ClaimedJob(Answer):
    """A row jobs.claim_v1 answered: claimed ('running') or buried ('dead' or 'failed').

    Not frozen: one is built for every claimed row, and a frozen dataclass pays a call per
    field to build. The input is kept as the database's JSON text, read by the input model's
    own JSON parser; `input` decodes it for the rare reader that wants a dict."""

    id: UUID
    run_id: UUID
    name: str
    queue: str
    input_json: str
    tenant_id: str | None
    state: JobState
    attempt: int
    max_attempts: int
    claim: int
    last_error: str | None
    traceparent: str | None
    enqueued_by: str | None
    # whether the run may have stored steps: False lets the worker skip reading its history
    has_steps: bool = True
    # for display: a worker's own claim leaves them out (None), as it never reads them
    priority: int | None = None
    run_at: datetime | None = None
    created_at: datetime | None = None
    lease_expires_at: datetime | None = None
    # who claimed it: the claim call's own argument, not a column
    worker_id: str = ""

    SELECTED: ClassVar[dict[str, str]] = {"input_json": "input::text"}
    NARROWED: ClassVar[Narrowed] = {"state": (JobState, "jobs.jobs.state")}
    LOCAL: ClassVar[tuple[str, ...]] = ("worker_id",)
    # the fields a worker's own claim leaves out (from_worker_row)
    DISPLAY: ClassVar[tuple[str, ...]] = ("priority", "run_at", "created_at", "lease_expires_at")

    @classmethod
    def from_worker_row(cls, row: Row, worker_id: str) -> ClaimedJob:
        """Build one from a row of every column but the DISPLAY ones, its run_id NULL where it
        is the job's own id."""
        values = list(row)
        if values[1] is None:
            values[1] = values[0]
        # narrow(), inline for the common value: a call per claimed row costs more than the test
        state = _JOB_STATES.get(values[6])
        values[6] = (
            narrow(JobState, values[6], table="jobs.jobs", column="state")
            if state is None
            else state
        )
        values += (None,) * len(cls.DISPLAY)
        values.append(worker_id)
        return cls(*values)

    @property
    def input(self) -> dict[str, Any]:
        """The input, decoded (each read decodes it again)."""
        decoded: dict[str, Any] = json.loads(self.input_json)
        return decoded

    @property
    def fence(self) -> Fence:
        """What this attempt's writes carry: refused once a later claim took the row."""
        return Fence(self.id, self.worker_id, self.claim)

    @property
    def buried(self) -> bool:
        """True for a row settled by the claim because its final attempt's lease lapsed."""
        return self.state is not JobState.RUNNING

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, slots=True)
class SettleResult(Answer):
    """One answer of a batch settle: did it land on the row this attempt held?"""

    id: UUID
    landed: bool


@dataclass(frozen=True, slots=True)
class JobOutcome(Answer):
    """Where a job stands as `jobs.results` answers it: its state, and for a finished one its
    result (done) or its last error and code (failed, dead, cancelled)."""

    NARROWED: ClassVar[Narrowed] = {"state": (JobState, "jobs.jobs.state")}

    id: UUID
    state: JobState
    result: Any
    error: str | None
    error_code: str | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.state not in LIVE_STATES


@dataclass(frozen=True, slots=True)
class ChildWait(Answer):
    """What `jobs.wait_children_v1` answered: every child settled (with their outcomes, one
    JSON object each in the order asked), or the parent is parked and the attempt is over."""

    settled: bool
    outcomes: list[dict[str, Any]] | None


@dataclass(frozen=True, slots=True)
class ChildSummary(Answer):
    """One child of a job, as `jobs.children` lists it."""

    NARROWED: ClassVar[Narrowed] = {"state": (JobState, "jobs.jobs.state")}

    id: UUID
    name: str
    state: JobState
    result: Any
    error: str | None
    error_code: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class StepRecord(Answer):
    """A durable step of a run, as stored."""

    name: str
    status: StepStatus
    output: Any
    error: str | None
    attempts: int
    started_at: datetime
    finished_at: datetime | None
    wake_at: datetime | None

    NARROWED: ClassVar[Narrowed] = {"status": (StepStatus, "jobs.steps.status")}


@dataclass(frozen=True, slots=True)
class QueueStat(Answer):
    """What one queue holds; `oldest_ready_age` is how long the oldest due ready job waited."""

    queue: str
    ready: int
    delayed: int
    running: int
    suspended: int
    dead: int
    oldest_ready_age: timedelta | None
    paused: bool


@dataclass(frozen=True, slots=True)
class HorizonHolder(Answer):
    """The oldest holder of the database's xmin horizon (jobs.horizon): a `session`, a
    `prepared` transaction or a replication `slot`; `age_seconds` is None for a slot."""

    holder: str
    pid: int | None
    user_name: str | None
    name: str | None
    state: str | None
    since: datetime | None
    age_seconds: float | None
    xid_age: int


@dataclass(frozen=True, slots=True)
class OutboxRecord(Answer):
    """A staged enqueue, as a relay claimed it. `input_json` is the request's input as jsonb
    writes it: published as it is, since through Python's floats jsonb's exact numbers (a
    money amount, an integer past 2**53) would change."""

    SELECTED: ClassVar[dict[str, str]] = {"input_json": "(request -> 'input')::text"}

    id: UUID
    run_id: UUID
    staged_at: datetime
    request: dict[str, Any]
    claimed_by: str | None
    claim_expires_at: datetime | None
    input_json: str


@dataclass(frozen=True, slots=True)
class EventLookup(Answer):
    """What jobs.find_event answered, with the database's now (the one clock of a wait)."""

    found: bool
    event_id: UUID | None
    payload: Any
    published_at: datetime | None
    now: datetime


@dataclass(frozen=True, slots=True)
class TaskState(Answer):
    """A cron task as the database holds it: its watermark, its last fire, its pause."""

    task: str
    watermark: datetime
    last_fired_occurrence: datetime | None
    last_fired_at: datetime | None
    paused: bool


@dataclass(frozen=True, slots=True)
class JobSummary(Answer):
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

    NARROWED: ClassVar[Narrowed] = {"state": (JobState, "jobs.jobs.state")}


@dataclass(frozen=True, slots=True)
class BulkResult(Answer):
    """What a bulk operator call moved, and how many rows a next call could still move."""

    affected: int
    remaining: int


@dataclass(frozen=True, slots=True)
class PurgeResult(Answer):
    """What one jobs.purge call deleted: jobs, steps, outbox rows and events."""

    jobs: int
    steps: int
    outbox: int
    events: int

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
class WorkerRecord(Answer):
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


@dataclass(frozen=True, slots=True)
class QueueDepth(Answer):
    """The autoscaler's number for one queue: running + due - held by draining workers."""

    queue: str
    running: int
    due: int
    draining_held: int
    depth: int


@dataclass(frozen=True, slots=True)
class CounterRow(Answer):
    """One bucket of one job name's counters (shards summed)."""

    name: str
    tier: str
    bucket: datetime
    done: int
    retried: int
    failed: int
    dead: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class CounterTotal(Answer):
    """One job name's counters summed over a time range."""

    name: str
    done: int
    retried: int
    failed: int
    dead: int
    duration_ms: int


@dataclass(frozen=True, slots=True)
class RoleGrant(Answer):
    """One role `jobs.grant_roles()` made or adopted: its kind (enqueuer, worker, operator)."""

    kind: str
    role_name: str
    created: bool


@dataclass(frozen=True, slots=True)
class JobType(Answer):
    """One declared job name in the catalogue (`jobs.job_types()`)."""

    name: str
    queue: str
    max_attempts: int
    priority: int
    tenant_required: bool
    retry: dict[str, Any]
    timeout: timedelta | None
    input_schema: dict[str, Any]
    declared_by: str
    declared_at: datetime
    seen_at: datetime
    concurrency: int | None  # at most this many running across the fleet
    concurrency_keyed: bool  # per concurrency_key
    when_busy: str  # 'wait', or 'fail': refuse a run whose key another run holds


@dataclass(frozen=True, slots=True)
class LimitRow(Answer):
    """One limit as `jobs.limits()` answers it: a job's declared limit (one row per key when
    keyed), or a rule of `jobs.set_limit` (one row per tenant for an every-tenant rule)."""

    scope: str  # 'job', 'fleet', 'queue', 'tenant' or 'every tenant'
    name: str | None  # the job, for scope 'job'
    concurrency_key: str | None
    queue: str | None  # a rule's queue; None: every queue
    tenant_id: str | None
    concurrency: int | None
    when_busy: str | None
    rate: int | None  # at most `rate` starts in any window of `per`
    per: timedelta | None
    started: int | None  # the starts inside the rate's window now
    running: int
    waiting: int
    held_back: int  # due rows waiting because the group is at its limit or used its rate
    holders: list[str]  # the workers running its attempts


@dataclass(frozen=True, slots=True)
class LimitRule(Answer):
    """A limit set in SQL (`jobs.set_limit`) as it now stands."""

    queue: str | None
    tenant_id: str | None
    every_tenant: bool
    concurrency: int | None
    rate: int | None
    per: timedelta | None
    set_by: str | None
    set_at: datetime


@dataclass(frozen=True, slots=True)
class Declared(Answer):
    """What `jobs.declare_job` did; `differences` maps each differing field to the stored and the
    declared value (for a conflict or a replacement)."""

    name: str
    outcome: DeclareOutcome
    differences: dict[str, dict[str, Any]] | None
    stored_by: str

    NARROWED: ClassVar[Narrowed] = {"outcome": (DeclareOutcome, "jobs.declare_job.outcome")}


@dataclass(frozen=True, slots=True)
class BackfillStart(Answer):
    """How a backfill's pass began (jobs.backfill_start_v1): `adopted` its run's row, `started`
    a new one, or `skipped` because a pass completed (`previous_run_id` names it)."""

    outcome: str
    previous_run_id: UUID | None
    previous_checksum: str | None
    batches: int
    rows_processed: int


@dataclass(frozen=True, slots=True)
class BackfillPass(Answer):
    """One row of the backfill ledger (jobs.backfills_v1); `job_state` is its job's state now."""

    id: int
    name: str
    run_id: UUID
    job_id: UUID
    tenant_id: str | None
    status: str
    job_state: str | None
    checksum: str
    environment: str
    forced: bool
    batches: int
    rows_processed: int
    started_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    failed_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True)
class WebhookCheck(Answer):
    """What a delivery asks before its request (jobs.webhook_check_v1): the endpoint's state,
    a delivery made already, and the answer this attempt got before a drain handed it back."""

    disabled_at: datetime | None
    delivered_at: datetime | None
    consecutive_failures: int
    this_outcome: str | None
    this_status_code: int | None
    this_error: str | None
    this_retry_after_seconds: float | None
    this_age_seconds: float | None


@dataclass(frozen=True, slots=True)
class WebhookRecorded(Answer):
    """The endpoint's count after an attempt was recorded, and whether it disabled it."""

    consecutive_failures: int
    disabled: bool


@dataclass(frozen=True, slots=True)
class WebhookEndpointState(Answer):
    """An endpoint deliveries have reached (jobs.webhook_endpoints_v1)."""

    webhook: str
    tenant_id: str | None
    endpoint_id: str
    consecutive_failures: int
    disabled_at: datetime | None
    disabled_reason: str | None
    last_attempt_at: datetime | None
    last_delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class WebhookAttempt(Answer):
    """One recorded delivery attempt (jobs.webhook_attempts_v1)."""

    id: int
    webhook: str
    tenant_id: str | None
    endpoint_id: str
    event_id: str
    topic: str
    job_id: UUID
    attempt: int
    outcome: str
    status_code: int | None
    error: str | None
    retry_after_seconds: float | None
    duration_ms: int | None
    at: datetime
