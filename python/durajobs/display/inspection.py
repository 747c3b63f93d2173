"""One job in full, for an operator: the row, its step trace and the retries still ahead.

The row and the trace come from `jobs.inspect_job` (one statement, one JSON document). The retry
schedule cannot: the delays live in the job's declaration, so it is computed here from the
registry that declares the job, and is None when no registry (or no declaration) is at hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durajobs._values.states import LIVE_STATES, JobState, narrow

if TYPE_CHECKING:
    from durajobs.declare.registry import Registry


@dataclass(frozen=True, slots=True)
class RetryAhead:
    """If attempt `after_attempt` fails, attempt `after_attempt + 1` waits about `delay`."""

    after_attempt: int
    delay: timedelta

    def as_json(self) -> dict[str, Any]:
        return {"after_attempt": self.after_attempt, "delay_seconds": self.delay.total_seconds()}


@dataclass(frozen=True, slots=True)
class JobDetail:
    """What `durajobs jobs show` prints: everything stored about a job, and what lies ahead."""

    job: dict[str, Any]
    steps: list[dict[str, Any]]
    queue_paused: bool
    retries_ahead: list[RetryAhead] | None
    # the job's concurrency limit and its group now: {concurrency, keyed, when_busy, key,
    # running, held_back}, or None for a job without one
    limit: dict[str, Any] | None = None
    # the limits set in SQL that count the row: [{queue, tenant_id, concurrency, running, rate,
    # per_seconds, started, held_back}, ...]
    rules: list[dict[str, Any]] = field(default_factory=list)
    # for a backfill's job: the backfill's state (services.backfills) and, as "this_pass", the
    # ledger row of this job's pass (None before the pass started)
    backfill: dict[str, Any] | None = None
    # the jobs its steps enqueued: {total, states: {state: n}, first: [{id, name, state}]}
    children: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> JobState:
        return narrow(JobState, self.job["state"], table="jobs.jobs", column="state")

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "steps": self.steps,
            "queue_paused": self.queue_paused,
            "retries_ahead": None
            if self.retries_ahead is None
            else [retry.as_json() for retry in self.retries_ahead],
            "limit": self.limit,
            "rules": self.rules,
            "backfill": self.backfill,
            "children": self.children,
        }


def retries_ahead(job: dict[str, Any], registry: Registry | None) -> list[RetryAhead] | None:
    """The delays (before jitter) between the attempts a live job still has.

    None when the job's declaration is unknown here; empty when nothing is ahead (the job
    finished, or the attempt running now is its last).
    """
    declared = registry.get(job["name"]) if registry is not None else None
    if declared is None:
        return None
    state = narrow(JobState, job["state"], table="jobs.jobs", column="state")
    if state not in LIVE_STATES:
        return []
    # a running attempt has already been counted; a waiting row's next attempt has not
    current = int(job["attempt"]) if state is JobState.RUNNING else int(job["attempt"]) + 1
    last = int(job["max_attempts"])
    return [
        RetryAhead(after_attempt=attempt, delay=declared.retry.base_delay(attempt))
        for attempt in range(max(current, 1), last)
    ]


def job_detail(document: dict[str, Any], registry: Registry | None = None) -> JobDetail:
    """Build the detail from what `jobs.inspect_job` answered."""
    job = dict(document["job"])
    return JobDetail(
        job=job,
        steps=list(document["steps"]),
        queue_paused=bool(document["queue_paused"]),
        retries_ahead=retries_ahead(job, registry),
        limit=document.get("limit"),
        rules=list(document.get("rules") or []),
        children=dict(document.get("children") or {}),
    )
