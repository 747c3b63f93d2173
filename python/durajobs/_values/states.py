"""The vocabularies stored in the database, narrowed by list when read.

A value this build does not know (written by a newer release) raises X_JOB_ROW_STATUS_UNKNOWN
instead of being cast: a step read as "not completed" would run a second time.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar, cast

from durajobs.errors import JobRowStatusUnknown


class JobState(StrEnum):
    READY = "ready"
    DELAYED = "delayed"
    RUNNING = "running"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"


LIVE_STATES = frozenset({JobState.READY, JobState.DELAYED, JobState.RUNNING, JobState.SUSPENDED})


class StepStatus(StrEnum):
    COMPLETED = "completed"
    SLEEPING = "sleeping"
    WAITING = "waiting"
    FAILED = "failed"


class NackTarget(StrEnum):
    """Where jobs.nack_v1 sends a row: the one decision a failed attempt makes."""

    READY = "ready"
    SUSPENDED = "suspended"
    DEAD = "dead"
    FAILED = "failed"


class HeartbeatAnswer(StrEnum):
    OK = "ok"
    CANCELLED = "cancelled"
    LOST = "lost"


class DeclareOutcome(StrEnum):
    """What jobs.declare_job did with a declaration."""

    ADDED = "added"
    UNCHANGED = "unchanged"
    REPLACED = "replaced"
    CONFLICT = "conflict"  # another deploy's different declaration was kept


E = TypeVar("E", bound=StrEnum)


def narrow(enum: type[E], value: object, *, table: str, column: str) -> E:
    """Return `value` as a member of `enum`, or raise X_JOB_ROW_STATUS_UNKNOWN naming the column."""
    member = enum._value2member_map_.get(value) if isinstance(value, str) else None
    if member is not None:
        return cast(E, member)
    known = [member.value for member in enum]
    raise JobRowStatusUnknown(
        f"{table}.{column} holds {value!r}, which this build does not know (known: {known})",
        detail={"table": table, "column": column, "value": value, "known": known},
    )
