"""The low-level, synchronous client: one method per SQL function, run on one connection."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

import psycopg

from durajobs._db import calls
from durajobs._db.calls import Call
from durajobs._db.execute import check_schema, execute
from durajobs._values.records import (
    ChildSummary,
    ClaimedJob,
    CounterRow,
    CounterTotal,
    EnqueueResult,
    Fence,
    HorizonHolder,
    JobOutcome,
    JobSummary,
    JobType,
    LimitRow,
    LimitRule,
    PurgeResult,
    QueueDepth,
    QueueStat,
    SettleResult,
    StepRecord,
    WorkerRecord,
)
from durajobs._values.states import HeartbeatAnswer, NackTarget, StepStatus
from durajobs.observe.tracing import current_traceparent, stamped

T = TypeVar("T")

log = logging.getLogger(__name__)


class Client:
    """The low-level, synchronous client: one method per SQL function, nothing more.

    Calls run on the given connection; in autocommit mode each call is its own transaction,
    otherwise it joins the caller's transaction (and commits or rolls back with it).
    """

    def __init__(self, connection: psycopg.Connection[Any], *, check: bool = True) -> None:
        self.connection = connection
        if check:
            check_schema(connection)

    @classmethod
    def connect(cls, database_url: str) -> Client:
        """Open an autocommit connection to `database_url` and check its schema version."""
        return cls(psycopg.connect(database_url, autocommit=True))

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, call: Call[T]) -> T:
        return execute(self.connection, call)

    def enqueue(
        self, name: str, input: Mapping[str, Any], idempotency_key: str, **options: Any
    ) -> EnqueueResult:
        """`jobs.enqueue`; the current span's trace context is stamped unless `traceparent` is
        given (None included)."""
        if "traceparent" not in options:
            options["traceparent"] = current_traceparent()
        return self.run(calls.enqueue(name, input, idempotency_key, **options))

    def enqueue_many(
        self, requests: Sequence[Mapping[str, Any]], *, on_conflict: str | None = None
    ) -> list[EnqueueResult]:
        """`jobs.enqueue_many`; a request without a `traceparent` key gets the current span's."""
        return self.run(calls.enqueue_many(stamped(requests), on_conflict=on_conflict))

    def claim(self, queues: Sequence[str], worker_id: str, **options: Any) -> list[ClaimedJob]:
        return self.run(calls.claim(queues, worker_id, **options))

    def ack(self, fence: Fence) -> bool:
        """Settle the attempt `fence` names as done (`ClaimedJob.fence` from a claim)."""
        return self.run(calls.ack(fence))

    def ack_many(
        self, worker_id: str, ids: Sequence[UUID], claims: Sequence[int]
    ) -> list[SettleResult]:
        return self.run(calls.ack_many(worker_id, ids, claims))

    def nack(
        self,
        fence: Fence,
        *,
        next_state: NackTarget = NackTarget.READY,
        delay: timedelta | None = None,
        counts_as_attempt: bool = True,
        error: str | None = None,
        error_code: str | None = None,
        error_stack: str | None = None,
    ) -> bool:
        return self.run(
            calls.nack(
                fence,
                next_state=next_state,
                delay=delay,
                counts_as_attempt=counts_as_attempt,
                error=error,
                error_code=error_code,
                error_stack=error_stack,
            )
        )

    def nack_many(self, worker_id: str, nacks: Sequence[Mapping[str, Any]]) -> list[SettleResult]:
        return self.run(calls.nack_many(worker_id, nacks))

    def heartbeat(self, fence: Fence, *, visibility: timedelta | None = None) -> HeartbeatAnswer:
        return self.run(calls.heartbeat(fence, visibility=visibility))

    def record_step(
        self,
        fence: Fence,
        name: str,
        status: StepStatus,
        *,
        output: Any = None,
        error: str | None = None,
        wake_at: datetime | None = None,
    ) -> StepRecord:
        return self.run(
            calls.record_step(fence, name, status, output=output, error=error, wake_at=wake_at)
        )

    def steps(self, run_id: UUID) -> list[StepRecord]:
        return self.run(calls.steps(run_id))

    def queue_stats(self, queues: Sequence[str] | None = None) -> list[QueueStat]:
        return self.run(calls.queue_stats(queues))

    def horizon(self) -> HorizonHolder | None:
        """The oldest holder of the database's xmin horizon (docs/operations.md section 19)."""
        return self.run(calls.horizon())

    def pause_queue(self, queue: str, *, paused_by: str | None = None) -> bool:
        return self.run(calls.pause_queue(queue, paused_by=paused_by))

    def resume_queue(self, queue: str) -> bool:
        return self.run(calls.resume_queue(queue))

    def cancel(self, id: UUID, *, reason: str | None = None, children: bool = False) -> bool:
        """Cancel a live job; `children=True` cancels its live descendants too."""
        return self.run(calls.cancel(id, reason=reason, children=children))

    def result(self, id: UUID) -> JobOutcome:
        """Where the job stands now: its state, and its result or last error once finished."""
        return self.run(calls.result(id))

    def children(self, id: UUID, *, max_rows: int | None = None) -> list[ChildSummary]:
        """The jobs the job's steps enqueued, oldest first."""
        return self.run(calls.children(id, max_rows=max_rows))

    def publish_event(
        self,
        name: str,
        payload: Any = None,
        *,
        correlation_key: str | None = None,
        ttl: timedelta | None = None,
        tenant_id: str | None = None,
    ) -> UUID:
        """Publish an event; runs waiting for it (step.wait_for_event) become due at once.
        With `tenant_id`, only that tenant's runs see it. Logs jobs.event.published (never the
        payload, which may hold what a log must not)."""
        event_id = self.run(
            calls.publish_event(
                name, payload, correlation_key=correlation_key, ttl=ttl, tenant_id=tenant_id
            )
        )
        log.info(
            "jobs.event.published",
            extra={
                "event": name,
                "id": str(event_id),
                "correlation_key": correlation_key,
                "tenant_id": tenant_id,
            },
        )
        return event_id

    def requeue(self, id: UUID, *, from_step: str | None = None) -> bool:
        return self.run(calls.requeue(id, from_step=from_step))

    def list_jobs(self, **filters: Any) -> list[JobSummary]:
        """One page of jobs, newest first (see jobs.list_jobs for the filters and cursors)."""
        return self.run(calls.list_jobs(**filters))

    def inspect_job(self, id: UUID) -> dict[str, Any]:
        """The `jobs.inspect_job` document: the row, its step trace, whether its queue is paused
        (`durajobs.display.inspection.job_detail` adds the retries a declaration still allows)."""
        return self.run(calls.inspect_job(id))

    def queue_depth(self, queues: Sequence[str] | None = None) -> list[QueueDepth]:
        return self.run(calls.queue_depth(queues))

    def workers(self) -> list[WorkerRecord]:
        return self.run(calls.workers_live())

    def counters(
        self, name: str | None = None, *, since: datetime | None = None
    ) -> list[CounterRow]:
        return self.run(calls.counters(name, since=since))

    def counter_totals(self, *, since: datetime | None = None) -> list[CounterTotal]:
        return self.run(calls.counter_totals(since=since))

    def job_types(self) -> list[JobType]:
        """The job catalogue (`jobs.job_types()`), in code-point order of the name."""
        return self.run(calls.job_types())

    def forget_job_type(self, name: str) -> bool:
        return self.run(calls.forget_job_type(name))

    def limits(self, name: str | None = None) -> list[LimitRow]:
        """Each limit, declared or set (per key, per tenant where it applies apart): what runs,
        waits and is held back (`jobs.limits()`); `name` keeps only that job's declared one."""
        return self.run(calls.limits(name))

    def set_limit(
        self,
        *,
        queue: str | None = None,
        tenant_id: str | None = None,
        every_tenant: bool = False,
        concurrency: int | None = None,
        rate: int | None = None,
        per: timedelta | None = None,
        set_by: str | None = None,
    ) -> LimitRule:
        """Set a fleet-wide limit (`jobs.set_limit`): for a queue, a tenant, each tenant, or the
        fleet; at most `concurrency` running and/or `rate` starts per `per`. A kind left None
        keeps what the selector already has. Raises X_ARGUMENT_INVALID."""
        return self.run(
            calls.set_limit(
                queue=queue,
                tenant_id=tenant_id,
                every_tenant=every_tenant,
                concurrency=concurrency,
                rate=rate,
                per=per,
                set_by=set_by,
            )
        )

    def clear_limit(
        self,
        *,
        queue: str | None = None,
        tenant_id: str | None = None,
        every_tenant: bool = False,
        kind: str = "all",
    ) -> bool:
        """Remove a limit set by `set_limit` (`kind`: 'concurrency', 'rate' or 'all'); answers
        whether one was removed."""
        return self.run(
            calls.clear_limit(
                queue=queue, tenant_id=tenant_id, every_tenant=every_tenant, kind=kind
            )
        )

    def rollup_counters(self) -> dict[str, int]:
        return self.run(calls.rollup_counters())

    def purge(
        self,
        *,
        done_after: timedelta | None = None,
        ended_after: timedelta | None = None,
        published_after: timedelta | None = None,
        batch_size: int | None = None,
    ) -> PurgeResult:
        """One `jobs.purge` call; None keeps a window's default. `Retention.call()` builds the
        same call from parsed options, and `Retention.more_after` says whether to call again."""
        return self.run(
            calls.purge(
                done_after=done_after,
                ended_after=ended_after,
                published_after=published_after,
                batch_size=batch_size,
            )
        )
