"""Every SQL statement the package sends, as one small builder per function.

A builder answers a `Call`: the function's name, the SQL in named notation, the parameters and
the decoder of its rows. The sync and async executors (and later the worker, the relay, the CLI)
run the same builders, so nothing is kept in step by hand. Optional arguments left as None are
not sent, so the SQL function's own default applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, TypeVar
from uuid import UUID

from psycopg import sql
from psycopg.types.json import Jsonb

from durajobs._values.records import (
    BackfillPass,
    BackfillStart,
    BulkResult,
    ChildSummary,
    ChildWait,
    ClaimedJob,
    CounterRow,
    CounterTotal,
    Declared,
    EnqueueResult,
    EventLookup,
    Fence,
    HorizonHolder,
    JobOutcome,
    JobSummary,
    JobType,
    LimitRow,
    LimitRule,
    OutboxRecord,
    PurgeResult,
    QueueDepth,
    QueueStat,
    RoleGrant,
    Row,
    SettleResult,
    StepRecord,
    TaskState,
    WebhookAttempt,
    WebhookCheck,
    WebhookEndpointState,
    WebhookRecorded,
    WorkerRecord,
)
from durajobs._values.states import HeartbeatAnswer, NackTarget, StepStatus, narrow
from durajobs._values.storable import json_text
from durajobs.errors import ArgumentInvalid, ClaimQueuesEmpty, DurajobsError, JobInputInvalid

T = TypeVar("T")

DEFAULT_VISIBILITY = timedelta(seconds=30)

# request values JSON has no type for; a tuple, as `UUID | datetime` would be built per value
_SENT_AS_TEXT = (UUID, datetime)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One call of one SQL function, ready for an executor."""

    function: str
    sql: str
    params: dict[str, Any]
    decode: Callable[[Sequence[Row]], T]


def _call(
    function: str,
    columns: str,
    arguments: Mapping[str, Any],
    decode: Callable[[Sequence[Row]], T],
    *,
    scalar: bool = False,
) -> Call[T]:
    sent = {name: value for name, value in arguments.items() if value is not None}
    named = ", ".join(f"{name} => %({name})s" for name in sent)
    source = f"{function}({named})"
    sql = f"select {source}" if scalar else f"select {columns} from {source}"
    return Call(function=function, sql=sql, params=sent, decode=decode)


def _checked_jsonb(
    value: Any, argument: str, error: type[DurajobsError] = ArgumentInvalid
) -> Jsonb:
    """`value` bound as one jsonb value, checked as psycopg dumps it: what is not JSON or what
    jsonb refuses (NaN, a NUL, a lone surrogate) raises `error` naming `argument`, before
    anything is sent, where the server would answer with a raw refusal and no X_* code."""

    def dumps(checked: Any) -> str:
        try:
            return json_text(checked)
        except (TypeError, ValueError) as invalid:
            raise error(
                f"{argument} is not JSON that jsonb holds: {invalid}",
                detail={"argument": argument, "problem": str(invalid)},
            ) from None

    return Jsonb(value, dumps=dumps)


def _as_read(text: str) -> str:
    """The dumps of a jsonb value read back as its text: it is JSON jsonb holds already."""
    return text


def _input_jsonb(value: Any) -> Jsonb:
    """A job's input (or requests holding inputs), refused as X_JOB_INPUT_INVALID: nothing is
    enqueued."""
    return _checked_jsonb(value, "input", JobInputInvalid)


def _array(values: Iterable[UUID | int | None]) -> str:
    """A uuid[] or bigint[] argument as one array literal, for Postgres to cast: psycopg's list
    dumper spends about 10 us an element, which at 500 acks a statement was a tenth of a busy
    worker's CPU. Only for UUIDs and integers, whose text needs no quoting; None is NULL, so the
    function still refuses it with its own error. A UUID goes as its 32 hex digits, which
    Postgres reads as well as the hyphenated form and Python writes in a quarter of the time."""
    return (
        "{"
        + ",".join(
            "NULL" if value is None else value.hex if type(value) is UUID else str(value)
            for value in values
        )
        + "}"
    )


def _one(from_row: Callable[[Row], T]) -> Callable[[Sequence[Row]], T]:
    def decode(rows: Sequence[Row]) -> T:
        return from_row(rows[0])

    return decode


def _all(from_row: Callable[[Row], T]) -> Callable[[Sequence[Row]], list[T]]:
    def decode(rows: Sequence[Row]) -> list[T]:
        return [from_row(row) for row in rows]

    return decode


def _first_column(rows: Sequence[Row]) -> list[Any]:
    return [row[0] for row in rows]


def _scalar(rows: Sequence[Row]) -> Any:
    return rows[0][0]


def version() -> Call[int]:
    return _call("jobs.version", "", {}, _scalar, scalar=True)


def enqueue(
    name: str,
    input: Mapping[str, Any] | Jsonb,
    idempotency_key: str,
    *,
    queue: str | None = None,
    tenant_id: str | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    id: UUID | None = None,
    run_id: UUID | None = None,
    on_conflict: str | None = None,
    traceparent: str | None = None,
    enqueued_by: str | None = None,
    concurrency_key: str | None = None,
    parent_id: UUID | None = None,
) -> Call[EnqueueResult]:
    arguments = {
        "name": name,
        # Jsonb binds the object as one jsonb value, never a double-encoded string; a
        # non-object reaches the function, which refuses it with X_JOB_INPUT_INVALID
        # a Jsonb already made (a relay's publish) is sent as it is
        "input": input
        if isinstance(input, Jsonb)
        else _input_jsonb(dict(input) if isinstance(input, Mapping) else input),
        "idempotency_key": idempotency_key,
        "queue": queue,
        "tenant_id": tenant_id,
        "run_at": run_at,
        "max_attempts": max_attempts,
        "priority": priority,
        "id": id,
        "run_id": run_id,
        "on_conflict": on_conflict,
        "traceparent": traceparent,
        "enqueued_by": enqueued_by,
        "concurrency_key": concurrency_key,
        "parent_id": parent_id,
    }
    return _call("jobs.enqueue", EnqueueResult.COLUMNS, arguments, _one(EnqueueResult.from_row))


def enqueue_many(
    requests: Sequence[Mapping[str, Any]], *, on_conflict: str | None = None
) -> Call[list[EnqueueResult]]:
    """Build jobs.enqueue_many; each request holds jobs.enqueue's argument names."""
    encoded = [
        {
            key: (str(value) if isinstance(value, _SENT_AS_TEXT) else value)
            for key, value in request.items()
            if value is not None
        }
        for request in requests
    ]
    return _call(
        "jobs.enqueue_many",
        EnqueueResult.COLUMNS,
        {"requests": _input_jsonb(encoded), "on_conflict": on_conflict},
        _all(EnqueueResult.from_row),
    )


def claim(
    queues: Sequence[str],
    worker_id: str,
    *,
    batch_size: int | None = None,
    visibility: timedelta | None = None,
    drop_exhausted: Sequence[str] | None = None,
    recover_lapsed: bool | None = None,
) -> Call[list[ClaimedJob]]:
    """`jobs.claim_v1`; `recover_lapsed=False` skips the burial and re-take of lapsed leases.
    A worker sends `WorkerClaim` instead."""
    _require_queues(queues)
    arguments = {
        "queues": list(queues),
        "worker_id": worker_id,
        "batch_size": batch_size,
        "visibility": visibility,
        "drop_exhausted": None if drop_exhausted is None else list(drop_exhausted),
        "recover_lapsed": recover_lapsed,
    }

    def decode(rows: Sequence[Row]) -> list[ClaimedJob]:
        # each row carries its claimant, so the fence of its writes is built here
        return [ClaimedJob.from_row(row, worker_id) for row in rows]

    return _call("jobs.claim_v1", ClaimedJob.COLUMNS, arguments, decode)


def _require_queues(queues: Sequence[str]) -> None:
    """Refuse an empty list of queues before SQL, as `jobs.claim_v1` would refuse it."""
    if not queues:
        raise ClaimQueuesEmpty(
            "claim: queues is empty, so no job could ever be claimed",
            detail={"argument": "queues"},
        )


# what a worker's claim reads: every column but those it never shows (ClaimedJob.DISPLAY).
# A run's first job is the run (run_id = id): its run_id comes back NULL and is taken from the
# id (ClaimedJob.from_worker_row), as a second UUID read costs about 0.4 us a row
_WORKER_CLAIM_COLUMNS = ", ".join(
    "nullif(run_id, id)" if column == "run_id" else column
    for column in ClaimedJob.COLUMNS.split(", ")
    if column not in ClaimedJob.DISPLAY
)


class WorkerClaim:
    """`jobs.claim_v1` as a worker sends it again and again: the queues, the worker, the lease
    and the jobs to drop written into the SQL once, as literals, so that each call sends only
    its size and whether it scans for lapsed leases. Adapting the lists and the interval on
    every call was about a tenth of an idle worker's pickup claim."""

    __slots__ = ("_calls", "_decode", "_sql")

    def __init__(
        self,
        queues: Sequence[str],
        worker_id: str,
        *,
        visibility: timedelta,
        drop_exhausted: Sequence[str],
    ) -> None:
        _require_queues(queues)
        fixed = {
            "queues": list(queues),
            "worker_id": worker_id,
            "visibility": visibility,
            "drop_exhausted": list(drop_exhausted),
        }
        literals = ", ".join(
            f"{name} => {sql.Literal(value).as_string(None)}" for name, value in fixed.items()
        )
        self._sql = (
            f"select {_WORKER_CLAIM_COLUMNS} from jobs.claim_v1({literals},"
            " batch_size => %(batch_size)s, recover_lapsed => %(recover_lapsed)s)"
        )

        def decode(rows: Sequence[Row]) -> list[ClaimedJob]:
            return [ClaimedJob.from_worker_row(row, worker_id) for row in rows]

        self._decode = decode
        # the calls made so far, by (batch_size, recover_lapsed): at most 2,000, and a worker
        # meets few (an idle worker's pickup asks for the same size every time)
        self._calls: dict[tuple[int, bool], Call[list[ClaimedJob]]] = {}

    def __call__(self, batch_size: int, *, recover_lapsed: bool) -> Call[list[ClaimedJob]]:
        key = (batch_size, recover_lapsed)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = Call(
                function="jobs.claim_v1",
                sql=self._sql,
                params={"batch_size": batch_size, "recover_lapsed": recover_lapsed},
                decode=self._decode,
            )
        return call


def ack(fence: Fence) -> Call[bool]:
    return _call("jobs.ack_v1", "", fence.arguments(), _scalar, scalar=True)


def ack_many_landed(worker_id: str, ids: Sequence[UUID], claims: Sequence[int]) -> Call[list[bool]]:
    """`jobs.ack_many_v1` answering only whether each ack landed, in input order: a worker's
    batch, which need not decode every id back."""
    arguments = {"worker_id": worker_id, "ids": _array(ids), "claims": _array(claims)}
    return _call("jobs.ack_many_v1", "landed", arguments, _first_column)


def ack_results_landed(
    worker_id: str, ids: Sequence[UUID], claims: Sequence[int], results: Sequence[Any]
) -> Call[list[bool]]:
    """`jobs.ack_results_v1`: acks that store what each body returned (JSON; None stores none),
    answering only whether each landed, in input order."""
    arguments = {
        "worker_id": worker_id,
        "ids": _array(ids),
        "claims": _array(claims),
        "results": [None if result is None else Jsonb(result) for result in results],
    }
    return _call("jobs.ack_results_v1", "landed", arguments, _first_column)


def nack_many_landed(worker_id: str, nacks: Sequence[Mapping[str, Any]]) -> Call[list[bool]]:
    """`jobs.nack_many_v1` answering only whether each nack landed, in input order."""
    call = nack_many(worker_id, nacks)
    return _call("jobs.nack_many_v1", "landed", call.params, _first_column)


def ack_many(
    worker_id: str, ids: Sequence[UUID], claims: Sequence[int]
) -> Call[list[SettleResult]]:
    arguments = {"worker_id": worker_id, "ids": _array(ids), "claims": _array(claims)}
    return _call("jobs.ack_many_v1", SettleResult.COLUMNS, arguments, _all(SettleResult.from_row))


def nack(
    fence: Fence,
    *,
    next_state: NackTarget = NackTarget.READY,
    delay: timedelta | None = None,
    counts_as_attempt: bool = True,
    error: str | None = None,
    error_code: str | None = None,
    error_stack: str | None = None,
) -> Call[bool]:
    arguments = {
        **fence.arguments(),
        "next_state": str(next_state),
        "delay": delay,
        "counts_as_attempt": counts_as_attempt,
        "error": error,
        "error_code": error_code,
        "error_stack": error_stack,
    }
    return _call("jobs.nack_v1", "", arguments, _scalar, scalar=True)


def nack_many(worker_id: str, nacks: Sequence[Mapping[str, Any]]) -> Call[list[SettleResult]]:
    """Build jobs.nack_many_v1; each nack holds jobs.nack_v1's argument names."""
    encoded = [
        {
            key: (
                str(value)
                if isinstance(value, UUID)
                else _interval_text(value)
                if isinstance(value, timedelta)
                else value
            )
            for key, value in item.items()
            if value is not None
        }
        for item in nacks
    ]
    arguments = {"worker_id": worker_id, "nacks": Jsonb(encoded)}
    return _call("jobs.nack_many_v1", SettleResult.COLUMNS, arguments, _all(SettleResult.from_row))


def _interval_text(value: timedelta) -> str:
    """`value` as Postgres interval text, exact to the microsecond. Not from total_seconds(): a
    float under 1e-4 prints as '9.5e-05', which the interval parser refuses (and a nack batch
    holding one failed whole). No days either: now() plus a day is a calendar day in the
    session's time zone, an hour more or less across a DST change."""
    seconds = value.days * 86_400 + value.seconds
    return f"{seconds} seconds {value.microseconds} microseconds"


def heartbeat(fence: Fence, *, visibility: timedelta | None = None) -> Call[HeartbeatAnswer]:
    arguments = {**fence.arguments(), "visibility": visibility}

    def decode(rows: Sequence[Row]) -> HeartbeatAnswer:
        return narrow(HeartbeatAnswer, rows[0][0], table="jobs.heartbeat_v1", column="answer")

    return _call("jobs.heartbeat_v1", "", arguments, decode, scalar=True)


def heartbeat_many(
    worker_id: str, fences: Sequence[Fence], *, visibility: timedelta | None = None
) -> Call[dict[tuple[UUID, int], HeartbeatAnswer]]:
    """One renewal of many leases of `worker_id`, each fenced on its own claim. Answers by
    (id, claim): two attempts of one row (an earlier one cancelled, the row requeued and claimed
    again) each get their own answer."""
    fences = list(fences)
    arguments = {
        "worker_id": worker_id,
        "ids": _array(fence.id for fence in fences),
        "claims": _array(fence.claim for fence in fences),
        "visibility": visibility,
    }

    def decode(rows: Sequence[Row]) -> dict[tuple[UUID, int], HeartbeatAnswer]:
        # one row a fence, in the order sent
        return {
            (fence.id, fence.claim): narrow(
                HeartbeatAnswer, row[1], table="jobs.heartbeat_many_v1", column="answer"
            )
            for fence, row in zip(fences, rows, strict=False)
            if row[0] == fence.id
        }

    return _call("jobs.heartbeat_many_v1", "id, answer", arguments, decode)


def record_step(
    fence: Fence,
    name: str,
    status: StepStatus,
    *,
    output: Any = None,
    error: str | None = None,
    wake_at: datetime | None = None,
) -> Call[StepRecord]:
    arguments = {
        **fence.arguments(),
        "name": name,
        "status": str(status),
        "output": None if output is None else Jsonb(output),
        "error": error,
        "wake_at": wake_at,
    }
    return _call("jobs.record_step_v1", StepRecord.COLUMNS, arguments, _one(StepRecord.from_row))


def steps(run_id: UUID) -> Call[list[StepRecord]]:
    return _call("jobs.steps_v1", StepRecord.COLUMNS, {"run_id": run_id}, _all(StepRecord.from_row))


def queue_stats(queues: Sequence[str] | None = None) -> Call[list[QueueStat]]:
    arguments = {"queues": None if queues is None else list(queues)}
    return _call("jobs.queue_stats", QueueStat.COLUMNS, arguments, _all(QueueStat.from_row))


def _first_or_none(from_row: Callable[[Row], T]) -> Callable[[Sequence[Row]], T | None]:
    def decode(rows: Sequence[Row]) -> T | None:
        return from_row(rows[0]) if rows else None

    return decode


def horizon() -> Call[HorizonHolder | None]:
    """`jobs.horizon`: the oldest holder of the database's xmin horizon, or None."""
    return _call("jobs.horizon", HorizonHolder.COLUMNS, {}, _first_or_none(HorizonHolder.from_row))


def pause_queue(queue: str, *, paused_by: str | None = None) -> Call[bool]:
    arguments = {"queue": queue, "paused_by": paused_by}
    return _call("jobs.pause_queue", "", arguments, _scalar, scalar=True)


def resume_queue(queue: str) -> Call[bool]:
    return _call("jobs.resume_queue", "", {"queue": queue}, _scalar, scalar=True)


def drain(id: UUID) -> Call[bool]:
    """`jobs.drain`: end a live job as done, counted nowhere (the work was done by hand)."""
    return _call("jobs.drain", "", {"id": id}, _scalar, scalar=True)


def cancel(id: UUID, *, reason: str | None = None, children: bool = False) -> Call[bool]:
    arguments = {"id": id, "reason": reason, "children": children or None}
    return _call("jobs.cancel", "", arguments, _scalar, scalar=True)


def results(ids: Sequence[UUID]) -> Call[list[JobOutcome]]:
    """`jobs.results`: the outcomes of the jobs of these ids that exist, in no order."""
    return _call(
        "jobs.results", JobOutcome.COLUMNS, {"ids": _array(ids)}, _all(JobOutcome.from_row)
    )


def result(id: UUID) -> Call[JobOutcome]:
    """`jobs.result`: one job's outcome; X_JOB_NOT_FOUND when no job has the id."""
    return _call("jobs.result", JobOutcome.COLUMNS, {"id": id}, _one(JobOutcome.from_row))


def await_results(ttl: timedelta) -> Call[int]:
    """`jobs.await_results_v1`: register a wait, so that settles notify `jobs_settled`."""
    return _call("jobs.await_results_v1", "", {"ttl": ttl}, _scalar, scalar=True)


def stop_awaiting(registration: int) -> Call[bool]:
    """`jobs.stop_awaiting_v1`: end a registration of `await_results`."""
    return _call("jobs.stop_awaiting_v1", "", {"id": registration}, _scalar, scalar=True)


def children(parent_id: UUID, *, max_rows: int | None = None) -> Call[list[ChildSummary]]:
    arguments = {"parent_id": parent_id, "max_rows": max_rows}
    return _call("jobs.children", ChildSummary.COLUMNS, arguments, _all(ChildSummary.from_row))


def enqueue_children(
    fence: Fence, name: str, requests: Sequence[Mapping[str, Any]]
) -> Call[list[EnqueueResult]]:
    """`jobs.enqueue_children_v1`: the children and the step that names them, in one
    transaction fenced on the parent's claim; each request holds jobs.enqueue's arguments."""
    arguments = {**fence.arguments(), "name": name, "requests": _input_jsonb(list(requests))}
    return _call(
        "jobs.enqueue_children_v1",
        EnqueueResult.COLUMNS,
        arguments,
        _all(EnqueueResult.from_row),
    )


def wait_children(
    fence: Fence, name: str, children: Sequence[UUID], *, poll: timedelta | None = None
) -> Call[ChildWait]:
    """`jobs.wait_children_v1`: the children's outcomes once all settled, else the parent is
    parked (the attempt is over: the caller must not settle it)."""
    arguments = {**fence.arguments(), "name": name, "children": _array(children), "poll": poll}
    return _call("jobs.wait_children_v1", ChildWait.COLUMNS, arguments, _one(ChildWait.from_row))


def requeue(id: UUID, *, from_step: str | None = None) -> Call[bool]:
    arguments = {"id": id, "from_step": from_step}
    return _call("jobs.requeue", "", arguments, _scalar, scalar=True)


WAKE_CHANNEL = "jobs_wake"


def listen(channel: str = WAKE_CHANNEL) -> str:
    """The statement a wake listener runs on its own connection."""
    return f"listen {channel}"


def wake_tokens(queues: Sequence[str]) -> Call[dict[str, str]]:
    """`jobs.wake_tokens`: what a wake of each of `queues` carries on `jobs_wake`, as a map
    from token to queue (a wake names no queue: any role may listen)."""
    return Call(
        function="jobs.wake_tokens",
        sql="select queue, token from jobs.wake_tokens(queues => %(queues)s::text[])",
        params={"queues": list(queues)},
        decode=lambda rows: {row[1]: row[0] for row in rows},
    )


def wake_probe(token: str, channel: str = WAKE_CHANNEL) -> Call[None]:
    """Send `token` on a wake channel, to prove a listener hears it."""
    return Call(
        function="pg_notify",
        sql="select pg_notify(%(channel)s, %(token)s)",
        params={"channel": channel, "token": token},
        decode=lambda rows: None,
    )


OUTBOX_WAKE_CHANNEL = "jobs_outbox_wake"


def outbox_stage(
    name: str,
    input: Mapping[str, Any],
    idempotency_key: str,
    *,
    queue: str | None = None,
    tenant_id: str | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    run_id: UUID | None = None,
    traceparent: str | None = None,
    enqueued_by: str | None = None,
    concurrency_key: str | None = None,
) -> Call[EnqueueResult]:
    arguments = {
        "name": name,
        "input": _input_jsonb(dict(input) if isinstance(input, Mapping) else input),
        "idempotency_key": idempotency_key,
        "queue": queue,
        "tenant_id": tenant_id,
        "run_at": run_at,
        "max_attempts": max_attempts,
        "priority": priority,
        "run_id": run_id,
        "traceparent": traceparent,
        "enqueued_by": enqueued_by,
        "concurrency_key": concurrency_key,
    }
    return _call(
        "jobs.outbox_stage", EnqueueResult.COLUMNS, arguments, _one(EnqueueResult.from_row)
    )


def outbox_claim(
    relay_id: str, *, batch_size: int | None = None, lease: timedelta | None = None
) -> Call[list[OutboxRecord]]:
    arguments = {"relay_id": relay_id, "batch_size": batch_size, "lease": lease}
    return _call("jobs.outbox_claim", OutboxRecord.COLUMNS, arguments, _all(OutboxRecord.from_row))


def outbox_mark_published(relay_id: str, ids: Sequence[UUID]) -> Call[list[UUID]]:
    arguments = {"relay_id": relay_id, "ids": list(ids)}

    def decode(rows: Sequence[Row]) -> list[UUID]:
        return [row[0] for row in rows]

    return _call("jobs.outbox_mark_published", "outbox_mark_published", arguments, decode)


def outbox_release(relay_id: str, ids: Sequence[UUID]) -> Call[int]:
    arguments = {"relay_id": relay_id, "ids": list(ids)}
    return _call("jobs.outbox_release", "", arguments, _scalar, scalar=True)


def outbox_relay(relay_id: str, *, batch_size: int | None = None) -> Call[list[EnqueueResult]]:
    arguments = {"relay_id": relay_id, "batch_size": batch_size}
    return _call(
        "jobs.outbox_relay", EnqueueResult.COLUMNS, arguments, _all(EnqueueResult.from_row)
    )


def publish(staged: OutboxRecord) -> Call[EnqueueResult]:
    """Enqueue a staged request under the outbox row's own id and run id (in the queue's
    database), so a re-publish meets the job the first publish made."""
    request = staged.request
    return enqueue(
        request["name"],
        Jsonb(staged.input_json, dumps=_as_read),
        request["idempotency_key"],
        queue=request.get("queue"),
        tenant_id=request.get("tenant_id"),
        run_at=datetime.fromisoformat(request["run_at"]) if request.get("run_at") else None,
        max_attempts=request.get("max_attempts"),
        priority=request.get("priority"),
        id=staged.id,
        run_id=staged.run_id,
        on_conflict="dedupe",
        traceparent=request.get("traceparent"),
        enqueued_by=request.get("enqueued_by"),
        concurrency_key=request.get("concurrency_key"),
    )


def publish_event(
    name: str,
    payload: Any = None,
    *,
    correlation_key: str | None = None,
    ttl: timedelta | None = None,
    tenant_id: str | None = None,
) -> Call[UUID]:
    """`jobs.publish_event`; `tenant_id` makes it an event for that tenant's runs alone."""
    arguments = {
        "name": name,
        "payload": None if payload is None else _checked_jsonb(payload, "payload"),
        "correlation_key": correlation_key,
        "ttl": ttl,
        "tenant_id": tenant_id,
    }
    return _call("jobs.publish_event", "", arguments, _scalar, scalar=True)


def find_event(
    name: str,
    *,
    correlation_key: str | None = None,
    after: datetime | None = None,
    tenant_id: str | None = None,
) -> Call[EventLookup]:
    """`jobs.find_event` for a run of `tenant_id`: another tenant's events are never found."""
    arguments = {
        "name": name,
        "correlation_key": correlation_key,
        "after": after,
        "tenant_id": tenant_id,
    }
    return _call("jobs.find_event", EventLookup.COLUMNS, arguments, _one(EventLookup.from_row))


def scheduler_arm(task: str, watermark: datetime) -> Call[TaskState]:
    arguments = {"task": task, "watermark": watermark}
    return _call("jobs.scheduler_arm", TaskState.COLUMNS, arguments, _one(TaskState.from_row))


def scheduler_fire(
    task: str,
    occurrence: datetime,
    requests: Sequence[Mapping[str, Any]],
    *,
    watermark: datetime | None = None,
) -> Call[list[EnqueueResult]]:
    arguments = {
        "task": task,
        "occurrence": occurrence,
        "requests": _input_jsonb([dict(request) for request in requests]),
        "watermark": watermark,
    }
    return _call(
        "jobs.scheduler_fire", EnqueueResult.COLUMNS, arguments, _all(EnqueueResult.from_row)
    )


def scheduler_lead(
    holder: str, *, ttl: timedelta | None = None, name: str | None = None
) -> Call[bool]:
    arguments = {"holder": holder, "ttl": ttl, "name": name}
    return _call("jobs.scheduler_lead", "", arguments, _scalar, scalar=True)


def scheduler_resign(holder: str, *, name: str | None = None) -> Call[bool]:
    return _call(
        "jobs.scheduler_resign", "", {"holder": holder, "name": name}, _scalar, scalar=True
    )


def pause_task(task: str) -> Call[bool]:
    return _call("jobs.pause_task", "", {"task": task}, _scalar, scalar=True)


def resume_task(task: str) -> Call[bool]:
    return _call("jobs.resume_task", "", {"task": task}, _scalar, scalar=True)


def task_fires() -> Call[list[TaskState]]:
    return _call("jobs.task_fires", TaskState.COLUMNS, {}, _all(TaskState.from_row))


def list_jobs(
    *,
    queue: str | None = None,
    name: str | None = None,
    state: str | None = None,
    tenant_id: str | None = None,
    id_prefix: str | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    page_size: int | None = None,
    after: UUID | None = None,
    before: UUID | None = None,
    idempotency_key: str | None = None,
    run_id: UUID | None = None,
) -> Call[list[JobSummary]]:
    arguments = {
        "idempotency_key": idempotency_key,
        "run_id": run_id,
        "queue": queue,
        "name": name,
        "state": state,
        "tenant_id": tenant_id,
        "id_prefix": id_prefix,
        "created_from": created_from,
        "created_to": created_to,
        "page_size": page_size,
        "after": after,
        "before": before,
    }
    return _call("jobs.list_jobs", JobSummary.COLUMNS, arguments, _all(JobSummary.from_row))


def remove(id: UUID) -> Call[bool]:
    return _call("jobs.remove", "", {"id": id}, _scalar, scalar=True)


def promote(id: UUID) -> Call[bool]:
    return _call("jobs.promote", "", {"id": id}, _scalar, scalar=True)


def _bulk(
    function: str, state: str, queue: str | None, name: str | None, tenant_id: str | None
) -> Call[BulkResult]:
    arguments = {"state": state, "queue": queue, "name": name, "tenant_id": tenant_id}
    return _call(function, BulkResult.COLUMNS, arguments, _one(BulkResult.from_row))


def requeue_many(
    state: str, *, queue: str | None = None, name: str | None = None, tenant_id: str | None = None
) -> Call[BulkResult]:
    return _bulk("jobs.requeue_many", state, queue, name, tenant_id)


def remove_many(
    state: str, *, queue: str | None = None, name: str | None = None, tenant_id: str | None = None
) -> Call[BulkResult]:
    return _bulk("jobs.remove_many", state, queue, name, tenant_id)


def promote_many(
    state: str, *, queue: str | None = None, name: str | None = None, tenant_id: str | None = None
) -> Call[BulkResult]:
    return _bulk("jobs.promote_many", state, queue, name, tenant_id)


def progress(
    fence: Fence, done: float, total: float | None = None, note: str | None = None
) -> Call[bool]:
    arguments = {
        **fence.arguments(),
        "done": _numeric(done),
        "total": _numeric(total),
        "note": note,
    }
    return _call("jobs.progress_v1", "", arguments, _scalar, scalar=True)


def _numeric(value: float | None) -> Decimal | float | None:
    """A float as a numeric argument: psycopg sends a float as double precision, which Postgres
    casts to numeric only on assignment, so a function taking numeric would not be found."""
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


def inspect_job(id: UUID) -> Call[dict[str, Any]]:
    return _call("jobs.inspect_job", "", {"id": id}, _scalar, scalar=True)


def queue_depth(queues: Sequence[str] | None = None) -> Call[list[QueueDepth]]:
    arguments = {"queues": None if queues is None else list(queues)}
    return _call("jobs.queue_depth", QueueDepth.COLUMNS, arguments, _all(QueueDepth.from_row))


def worker_announce(
    worker_id: str,
    *,
    host: str,
    pid: int,
    queues: Sequence[str],
    slots: int,
    ttl: timedelta | None = None,
) -> Call[None]:
    arguments = {
        "worker_id": worker_id,
        "host": host,
        "pid": pid,
        "queues": list(queues),
        "slots": slots,
        "ttl": ttl,
    }
    return _call("jobs.worker_announce", "", arguments, lambda _rows: None, scalar=True)


def worker_heartbeat(
    worker_id: str, in_flight: Sequence[UUID], *, ttl: timedelta | None = None
) -> Call[bool]:
    arguments = {"worker_id": worker_id, "in_flight": list(in_flight), "ttl": ttl}
    return _call("jobs.worker_heartbeat", "", arguments, _scalar, scalar=True)


def worker_running(worker_id: str) -> Call[list[Fence]]:
    """`jobs.worker_running_v1`: the fence of each row `worker_id` holds running."""

    def decode(rows: Sequence[Row]) -> list[Fence]:
        return [Fence(row[0], worker_id, int(row[1])) for row in rows]

    return _call("jobs.worker_running_v1", "id, claim", {"worker_id": worker_id}, decode)


def worker_draining(worker_id: str) -> Call[bool]:
    return _call("jobs.worker_draining", "", {"worker_id": worker_id}, _scalar, scalar=True)


def worker_forget(worker_id: str) -> Call[bool]:
    return _call("jobs.worker_forget", "", {"worker_id": worker_id}, _scalar, scalar=True)


def grant_roles(
    *, enqueuer: str | None = None, worker: str | None = None, operator: str | None = None
) -> Call[list[RoleGrant]]:
    """`jobs.grant_roles`: the owner makes (or adopts) the three roles and lets them call the
    functions; a name left None takes the default (durajobs_enqueuer, ...)."""
    arguments = {"enqueuer": enqueuer, "worker": worker, "operator": operator}
    return _call("jobs.grant_roles", RoleGrant.COLUMNS, arguments, _all(RoleGrant.from_row))


def redact_keys(fragments: Sequence[str]) -> Call[int]:
    """`jobs.redact_keys`: hide these input keys' values from operators too (answers how
    many were new)."""
    return Call(
        function="jobs.redact_keys",
        sql="select jobs.redact_keys(fragments => %(fragments)s::text[])",
        params={"fragments": list(fragments)},
        decode=_scalar,
    )


def workers_live() -> Call[list[WorkerRecord]]:
    return _call("jobs.workers_live", WorkerRecord.COLUMNS, {}, _all(WorkerRecord.from_row))


def counters(name: str | None = None, *, since: datetime | None = None) -> Call[list[CounterRow]]:
    arguments = {"name": name, "since": since}
    return _call("jobs.counters", CounterRow.COLUMNS, arguments, _all(CounterRow.from_row))


def counter_totals(*, since: datetime | None = None) -> Call[list[CounterTotal]]:
    arguments = {"since": since}
    return _call(
        "jobs.counter_totals", CounterTotal.COLUMNS, arguments, _all(CounterTotal.from_row)
    )


def purge(
    *,
    done_after: timedelta | None = None,
    ended_after: timedelta | None = None,
    published_after: timedelta | None = None,
    batch_size: int | None = None,
) -> Call[PurgeResult]:
    """`jobs.purge`: one batch of what outlived its window; None keeps the function's default."""
    arguments = {
        "done_after": done_after,
        "ended_after": ended_after,
        "published_after": published_after,
        "batch_size": batch_size,
    }
    return _call("jobs.purge", PurgeResult.COLUMNS, arguments, _one(PurgeResult.from_row))


def rollup_counters() -> Call[dict[str, int]]:
    def decode(rows: Sequence[Row]) -> dict[str, int]:
        return {str(row[0]): int(row[1]) for row in rows}

    return _call("jobs.rollup_counters", "tier, moved", {}, decode)


def declare_job(
    name: str,
    *,
    queue: str,
    max_attempts: int,
    priority: int,
    tenant_required: bool,
    declared_by: str,
    retry: Mapping[str, Any] | None = None,
    timeout: timedelta | None = None,
    input_schema: Mapping[str, Any] | None = None,
    replace: bool = False,
    concurrency: int | None = None,
    concurrency_keyed: bool = False,
    when_busy: str = "wait",
) -> Call[Declared]:
    arguments = {
        "name": name,
        "queue": queue,
        "max_attempts": max_attempts,
        "priority": priority,
        "tenant_required": tenant_required,
        "declared_by": declared_by,
        "retry": None if retry is None else Jsonb(dict(retry)),
        "timeout": timeout,
        "input_schema": None if input_schema is None else Jsonb(dict(input_schema)),
        "replace": replace,
        "concurrency": concurrency,
        "concurrency_keyed": concurrency_keyed,
        "when_busy": when_busy,
    }
    return _call("jobs.declare_job", Declared.COLUMNS, arguments, _one(Declared.from_row))


def job_types() -> Call[list[JobType]]:
    return _call("jobs.job_types", JobType.COLUMNS, {}, _all(JobType.from_row))


def forget_job_type(name: str) -> Call[bool]:
    return _call("jobs.forget_job_type", "", {"name": name}, _scalar, scalar=True)


def limits(name: str | None = None) -> Call[list[LimitRow]]:
    return _call("jobs.limits", LimitRow.COLUMNS, {"name": name}, _all(LimitRow.from_row))


def set_limit(
    *,
    queue: str | None = None,
    tenant_id: str | None = None,
    every_tenant: bool = False,
    concurrency: int | None = None,
    rate: int | None = None,
    per: timedelta | None = None,
    set_by: str | None = None,
) -> Call[LimitRule]:
    arguments = {
        "queue": queue,
        "tenant_id": tenant_id,
        "every_tenant": every_tenant,
        "concurrency": concurrency,
        "rate": rate,
        "per": per,
        "set_by": set_by,
    }
    return _call("jobs.set_limit", LimitRule.COLUMNS, arguments, _one(LimitRule.from_row))


def clear_limit(
    *,
    queue: str | None = None,
    tenant_id: str | None = None,
    every_tenant: bool = False,
    kind: str = "all",
) -> Call[bool]:
    arguments = {"queue": queue, "tenant_id": tenant_id, "every_tenant": every_tenant, "kind": kind}
    return _call("jobs.clear_limit", "", arguments, _scalar, scalar=True)


def backfill_start(
    name: str,
    *,
    run_id: UUID,
    job_id: UUID,
    checksum: str,
    environment: str,
    force: bool,
    tenant_id: str | None,
) -> Call[BackfillStart]:
    arguments = {
        "name": name,
        "run_id": run_id,
        "job_id": job_id,
        "checksum": checksum,
        "environment": environment,
        "force": force,
        "tenant_id": tenant_id,
    }
    return _call(
        "jobs.backfill_start_v1", BackfillStart.COLUMNS, arguments, _one(BackfillStart.from_row)
    )


def backfill_progress(run_id: UUID, *, batches: int, rows_processed: int) -> Call[bool]:
    arguments = {"run_id": run_id, "batches": batches, "rows_processed": rows_processed}
    return _call("jobs.backfill_progress_v1", "", arguments, _scalar, scalar=True)


def backfill_finish(run_id: UUID, *, status: str, error: str | None = None) -> Call[bool]:
    arguments = {"run_id": run_id, "status": status, "error": error}
    return _call("jobs.backfill_finish_v1", "", arguments, _scalar, scalar=True)


def backfills(
    backfill: str | None = None, *, max_rows: int | None = None
) -> Call[list[BackfillPass]]:
    arguments = {"backfill": backfill, "max_rows": max_rows}
    return _call("jobs.backfills_v1", BackfillPass.COLUMNS, arguments, _all(BackfillPass.from_row))


def webhook_check(
    webhook: str,
    endpoint_id: str,
    event_id: str,
    *,
    tenant_id: str | None = None,
    job_id: UUID | None = None,
    attempt: int | None = None,
) -> Call[WebhookCheck]:
    arguments = {
        "webhook": webhook,
        "endpoint_id": endpoint_id,
        "event_id": event_id,
        "tenant_id": tenant_id,
        "job_id": job_id,
        "attempt": attempt,
    }
    return _call(
        "jobs.webhook_check_v1", WebhookCheck.COLUMNS, arguments, _one(WebhookCheck.from_row)
    )


def webhook_record(
    webhook: str,
    *,
    endpoint_id: str,
    event_id: str,
    topic: str,
    job_id: UUID,
    attempt: int,
    outcome: str,
    status_code: int | None,
    error: str | None,
    duration_ms: int | None,
    disable_after: int | None,
    tenant_id: str | None,
    retry_after_seconds: float | None = None,
) -> Call[WebhookRecorded]:
    arguments = {
        "webhook": webhook,
        "endpoint_id": endpoint_id,
        "event_id": event_id,
        "topic": topic,
        "job_id": job_id,
        "attempt": attempt,
        "outcome": outcome,
        "status_code": status_code,
        "error": error,
        "duration_ms": duration_ms,
        "disable_after": disable_after,
        "tenant_id": tenant_id,
        "retry_after_seconds": retry_after_seconds,
    }
    return _call(
        "jobs.webhook_record_v1", WebhookRecorded.COLUMNS, arguments, _one(WebhookRecorded.from_row)
    )


def enable_webhook_endpoint(
    endpoint_id: str, *, webhook: str | None = None, tenant_id: str | None = None
) -> Call[int]:
    arguments = {"endpoint_id": endpoint_id, "webhook": webhook, "tenant_id": tenant_id}
    return _call("jobs.enable_webhook_endpoint_v1", "", arguments, _scalar, scalar=True)


def webhook_endpoints() -> Call[list[WebhookEndpointState]]:
    return _call(
        "jobs.webhook_endpoints_v1",
        WebhookEndpointState.COLUMNS,
        {},
        _all(WebhookEndpointState.from_row),
    )


def webhook_attempts(
    *, endpoint_id: str | None = None, event_id: str | None = None, max_rows: int | None = None
) -> Call[list[WebhookAttempt]]:
    arguments = {"endpoint": endpoint_id, "event": event_id, "max_rows": max_rows}
    return _call(
        "jobs.webhook_attempts_v1", WebhookAttempt.COLUMNS, arguments, _all(WebhookAttempt.from_row)
    )


def relation_exists(name: str) -> Call[bool]:
    """Whether the table `name` (as the search path finds it) exists."""
    return Call(
        function="to_regclass",
        sql="select to_regclass(%(name)s) is not null",
        params={"name": name},
        decode=_scalar,
    )


def alembic_heads(version_table: str) -> Call[list[Any]]:
    """The revisions an application's alembic version table holds (check that it exists
    first: a missing table is an error)."""
    table = ".".join(f'"{part}"' for part in version_table.split(".", 1))
    return Call(
        function=version_table,
        sql=f"select version_num from {table}",
        params={},
        decode=_first_column,
    )
