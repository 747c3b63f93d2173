"""The backfills' one projection: each declared backfill's state from the ledger's passes.

`inspect_backfills` is a pure function of the declarations, the passes jobs.backfills_v1
answers and an environment: it reads no clock and no table, so the `durajobs backfill` commands,
`durajobs jobs show` and the dashboard show the same numbers. The states:

- pending: no pass has run (a backfill merged and deployed but never enqueued is pending, not
  invisible);
- running: the newest pass's job is live (waiting, running, suspended, or failed and about to
  be retried);
- completed: the newest pass completed;
- failed: the newest pass failed and its job is not live (dead, cancelled, or purged);
- excluded: the backfill does not run in this environment.

Pending and failed are what a `run --all --write` enqueues (`pending`); the deploy gate waits for
those and for the running ones too (`unswept`): a pass on its way is not a sweep made.
`orphaned` names the ledger's backfills that no declaration names any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from durajobs._db import calls
from durajobs._db.execute import execute
from durajobs._values.records import BackfillPass, JobSummary
from durajobs.declare.backfill import VERSION_TABLE, Backfill, BackfillState, revision_applied

LIVE_STATES = frozenset({"ready", "delayed", "running", "suspended"})
PENDING_STATES: frozenset[BackfillState] = frozenset({"pending", "failed"})
UNSWEPT_STATES: frozenset[BackfillState] = frozenset({"pending", "failed", "running"})


@dataclass(frozen=True, slots=True)
class BackfillStatus:
    """One declared backfill as the ledger has it; the pass fields are its newest pass's."""

    name: str
    state: BackfillState
    requires: str | None
    environments: tuple[str, ...]
    passes: int
    run_id: UUID | None = None
    job_id: UUID | None = None
    job_state: str | None = None
    batches: int = 0
    rows: int = 0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    error: str | None = None
    checksum_moved: bool = False

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "pending": self.pending,
            "requires": self.requires,
            "environments": list(self.environments),
            "passes": self.passes,
            "run_id": self.run_id,
            "job_id": self.job_id,
            "job_state": self.job_state,
            "batches": self.batches,
            "rows": self.rows,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
            "error": self.error,
            "checksum_moved": self.checksum_moved,
        }


@dataclass(frozen=True, slots=True)
class BackfillReport:
    environment: str
    rows: tuple[BackfillStatus, ...]
    orphaned: tuple[str, ...]

    @property
    def pending(self) -> tuple[str, ...]:
        """The backfills a pass must be enqueued for: never run, or the last pass failed."""
        return tuple(row.name for row in self.rows if row.pending)

    @property
    def unswept(self) -> tuple[BackfillStatus, ...]:
        """What the deploy gate waits for: the pending ones and the passes on their way."""
        return tuple(row for row in self.rows if row.state in UNSWEPT_STATES)

    def get(self, name: str) -> BackfillStatus | None:
        return next((row for row in self.rows if row.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "rows": [row.as_dict() for row in self.rows],
            "pending": list(self.pending),
            "unswept": [row.name for row in self.unswept],
            "orphaned": list(self.orphaned),
        }


def inspect_backfills(
    backfills: Iterable[Backfill],
    passes: Sequence[BackfillPass],
    environment: str,
    live: Mapping[str, JobSummary] | None = None,
) -> BackfillReport:
    """Each declaration's state, from `passes` (any order) and `live`, the live job of each
    backfill that has one (a pass enqueued but not yet started has no ledger row); see the
    module's head."""
    by_name: dict[str, list[BackfillPass]] = {}
    for each in passes:
        by_name.setdefault(each.name, []).append(each)
    for rows in by_name.values():
        rows.sort(key=lambda row: (row.started_at, row.id), reverse=True)
    statuses = []
    declared = set()
    for backfill in sorted(backfills, key=lambda b: b.name):
        declared.add(backfill.name)
        waiting = (live or {}).get(backfill.name)
        statuses.append(_status(backfill, by_name.get(backfill.name, []), environment, waiting))
    orphaned = tuple(sorted(set(by_name) - declared))
    return BackfillReport(environment=environment, rows=tuple(statuses), orphaned=orphaned)


def _status(
    backfill: Backfill,
    passes: list[BackfillPass],
    environment: str,
    waiting: JobSummary | None,
) -> BackfillStatus:
    facts: dict[str, Any] = {
        "name": backfill.name,
        "requires": backfill.requires,
        "environments": backfill.environments,
        "passes": len(passes),
    }
    if not backfill.runs_in(environment):
        return BackfillStatus(state="excluded", **facts)
    if waiting is not None and all(row.job_id != waiting.id for row in passes):
        # enqueued, not started: its pass has no ledger row yet
        return BackfillStatus(
            state="running", job_id=waiting.id, run_id=waiting.run_id,
            job_state=str(waiting.state), **facts,
        )  # fmt: skip
    if not passes:
        return BackfillStatus(state="pending", **facts)
    newest = passes[0]
    completed = next((row for row in passes if row.status == "completed"), None)
    return BackfillStatus(
        state=_state(newest),
        run_id=newest.run_id,
        job_id=newest.job_id,
        job_state=newest.job_state,
        batches=newest.batches,
        rows=newest.rows_processed,
        started_at=newest.started_at,
        completed_at=newest.completed_at,
        error=newest.error,
        checksum_moved=completed is not None and completed.checksum != backfill.checksum,
        **facts,
    )


def _state(newest: BackfillPass) -> BackfillState:
    if newest.status == "completed":
        return "completed"
    # the ledger's 'running' or 'failed' is what the pass last wrote; its job says whether it
    # goes on (a failed attempt about to be retried) or has ended
    return "running" if newest.job_state in LIVE_STATES else "failed"


def report_calls(
    backfills: Sequence[Backfill],
) -> tuple[calls.Call[list[BackfillPass]], list[calls.Call[list[JobSummary]]]]:
    """What a report reads: the ledger's passes, and one listing a backfill (they are few) for
    its live job. Run them (sync or async) and hand the answers to `report_from`."""
    listings = [calls.list_jobs(name=backfill.name, page_size=10) for backfill in backfills]
    return calls.backfills(), listings


def report_from(
    backfills: Sequence[Backfill],
    environment: str,
    passes: Sequence[BackfillPass],
    listings: Sequence[Sequence[JobSummary]],
) -> BackfillReport:
    """The report from what `report_calls` read, in its order."""
    live: dict[str, JobSummary] = {}
    for backfill, jobs in zip(backfills, listings, strict=True):
        waiting = next((job for job in jobs if str(job.state) in LIVE_STATES), None)
        if waiting is not None:
            live[backfill.name] = waiting
    return inspect_backfills(backfills, passes, environment, live)


def read_report(
    run: Callable[[calls.Call[Any]], Any], backfills: Sequence[Backfill], environment: str
) -> BackfillReport:
    """The report, read through the synchronous `run` (a Client's)."""
    passes_call, listing_calls = report_calls(backfills)
    listings = [run(call) for call in listing_calls]
    return report_from(backfills, environment, run(passes_call), listings)


def migration_applied(
    connection: psycopg.Connection[Any],
    revision: str,
    *,
    alembic_ini: str | Path | None = None,
    version_table: str = VERSION_TABLE,
) -> bool:
    """Whether the application's alembic revision `revision` is applied on `connection` (see
    declare.backfill.revision_applied). No version table means nothing is applied."""
    with connection.transaction():
        if not execute(connection, calls.relation_exists(version_table)):
            return False
        heads = [str(head) for head in execute(connection, calls.alembic_heads(version_table))]
    return revision_applied(heads, revision, alembic_ini)
