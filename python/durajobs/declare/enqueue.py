"""One enqueue as a value: what a job's `enqueue` asks for, checked and ready to send.

`Job.request` builds an `EnqueueRequest` (the input validated, the key and tenant derived, the
time resolved); the router decides where it goes and whether it is staged; the request then
answers the one call that goes out. The cron scheduler reads the same value for its fires, so a
task's entry and a direct enqueue cannot disagree about what a job's request holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from durajobs._db import calls
from durajobs._values.records import EnqueueResult
from durajobs.errors import ArgumentInvalid

OnConflict = Literal["dedupe", "error"]


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """The arguments of one `jobs.enqueue`, named as the SQL function names them."""

    name: str
    input: dict[str, Any]  # the validated input, as JSON
    idempotency_key: str
    queue: str
    max_attempts: int
    tenant_id: str | None = None
    run_at: datetime | None = None
    priority: int | None = None
    run_id: UUID | None = None
    on_conflict: OnConflict = "dedupe"
    enqueued_by: str | None = None
    traceparent: str | None = None
    concurrency_key: str | None = None  # the run's key under a keyed concurrency limit

    def call(self) -> calls.Call[EnqueueResult]:
        """`jobs.enqueue` with these arguments: the job's row, written where it runs."""
        return calls.enqueue(
            self.name,
            self.input,
            self.idempotency_key,
            queue=self.queue,
            tenant_id=self.tenant_id,
            run_at=self.run_at,
            max_attempts=self.max_attempts,
            priority=self.priority,
            run_id=self.run_id,
            on_conflict=self.on_conflict,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            concurrency_key=self.concurrency_key,
        )

    def staged_call(self) -> calls.Call[EnqueueResult]:
        """`jobs.outbox_stage` with these arguments, for a relay to publish after commit."""
        if self.on_conflict != "dedupe":
            raise ArgumentInvalid(
                f"job {self.name}: on_conflict={self.on_conflict!r} cannot be answered at stage "
                "time; a staged enqueue learns of a live duplicate only when it is published",
                detail={"job": self.name, "argument": "on_conflict"},
            )
        return calls.outbox_stage(
            self.name,
            self.input,
            self.idempotency_key,
            queue=self.queue,
            tenant_id=self.tenant_id,
            run_at=self.run_at,
            max_attempts=self.max_attempts,
            priority=self.priority,
            run_id=self.run_id,
            enqueued_by=self.enqueued_by,
            traceparent=self.traceparent,
            concurrency_key=self.concurrency_key,
        )

    def child_entry(self) -> dict[str, Any]:
        """The request `jobs.enqueue_children_v1` takes: jobs.enqueue's arguments as JSON (the
        parent is the attempt's job, named by the call's fence)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "input": self.input,
            "idempotency_key": self.idempotency_key,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
            "on_conflict": self.on_conflict,
        }
        optional = {
            "tenant_id": self.tenant_id,
            "run_at": None if self.run_at is None else self.run_at.isoformat(),
            "priority": self.priority,
            "traceparent": self.traceparent,
            "enqueued_by": self.enqueued_by,
            "concurrency_key": self.concurrency_key,
        }
        entry.update({key: value for key, value in optional.items() if value is not None})
        return entry

    def fire_entry(self) -> dict[str, Any]:
        """The entry `jobs.scheduler_fire` takes: the run's time, id and trace are the fire's."""
        entry: dict[str, Any] = {
            "name": self.name,
            "input": self.input,
            "idempotency_key": self.idempotency_key,
            "queue": self.queue,
            "max_attempts": self.max_attempts,
        }
        if self.tenant_id is not None:
            entry["tenant_id"] = self.tenant_id
        if self.concurrency_key is not None:
            entry["concurrency_key"] = self.concurrency_key
        return entry
