"""Concurrency limits as a job declares them: at most N attempts running across the whole fleet,
for the job or per key of its input. The claim enforces them in SQL (jobs._claim_limited), so a
worker in any language obeys them; this module only checks what is declared and derives the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from durajobs.errors import ArgumentInvalid, DeclarationInvalid

# what jobs.enqueue accepts as a concurrency_key
MAX_KEY_LENGTH = 200

# the fields of a declaration the claim enforces a limit from (jobs.declare_job's differences)
LIMIT_FIELDS = frozenset({"concurrency", "concurrency_keyed", "when_busy"})

WhenBusy = Literal["wait", "fail"]


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most `limit` attempts running at once among the runs whose `key(input)` is the same,
    across every worker: `concurrency=Concurrency(key=lambda i: i.account_id, limit=1)`.
    `when_busy="fail"` settles a run whose key another run holds as failed (X_JOB_KEY_BUSY, the
    outcome 'refused') instead of queueing it behind that run."""

    key: Callable[[Any], str]
    limit: int = 1
    when_busy: WhenBusy = "wait"


@dataclass(frozen=True, slots=True)
class Limit:
    """A job's checked concurrency declaration: `limit` running at once, per key when keyed."""

    limit: int
    key: Callable[[Any], str] | None = None
    when_busy: WhenBusy = "wait"

    @property
    def keyed(self) -> bool:
        return self.key is not None

    def key_of(self, job: str, input: Any) -> str | None:
        """The run's concurrency key (None when the limit is the job's): a non-empty text of at
        most 200 characters, else X_ARGUMENT_INVALID naming the job, as for a key() that
        raises."""
        if self.key is None:
            return None
        try:
            key = self.key(input)
        except Exception as failure:
            # at enqueue, so nothing is stored: the claim never calls key() (R66)
            raise ArgumentInvalid(
                f"job {job}: its concurrency key raised {failure!r}",
                detail={"job": job, "argument": "concurrency_key"},
            ) from failure
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
            raise ArgumentInvalid(
                f"job {job}: its concurrency key answered {key!r}; it must be a non-empty text of "
                f"at most {MAX_KEY_LENGTH} characters",
                detail={"job": job, "argument": "concurrency_key"},
            )
        return key


def parse_concurrency(job: str, concurrency: object) -> Limit | None:
    """The declaration's `concurrency=`: None, a positive int, or a `Concurrency`; anything else
    is X_JOB_DECLARATION_INVALID at import time."""
    if concurrency is None:
        return None
    if isinstance(concurrency, Concurrency):
        if not callable(concurrency.key):
            raise DeclarationInvalid(
                f"job {job}: Concurrency(key=...) must be a function of the input",
                detail={"job": job, "field": "concurrency.key"},
            )
        if concurrency.when_busy not in ("wait", "fail"):
            raise DeclarationInvalid(
                f"job {job}: when_busy must be 'wait' or 'fail', got {concurrency.when_busy!r}",
                detail={"job": job, "field": "concurrency.when_busy"},
            )
        limit = _positive(job, concurrency.limit, "concurrency.limit")
        return Limit(limit, concurrency.key, concurrency.when_busy)
    return Limit(_positive(job, concurrency, "concurrency"))


def _positive(job: str, value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DeclarationInvalid(
            f"job {job}: {field} must be an integer of at least 1, got {value!r}",
            detail={"job": job, "field": field},
        )
    return value
