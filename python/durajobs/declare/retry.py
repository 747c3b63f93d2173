"""Retry policy and error classification: what happens to an attempt that raised.

A terminal code dead-letters on the attempt it happens; a retry-after code retries when the error
says (clamped by max_delay); a retryable or unclassified error follows the backoff. Lease and slot
loss are deliberately unclassified: the worker that lost a row never settles it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Literal

from durajobs._values.durations import Duration, parse_duration, positive_count
from durajobs.errors import DeclarationInvalid, ErrorCodeDuplicate

DEFAULT_ATTEMPTS = 20
# the most attempts jobs.enqueue takes (max_attempts from 1 to 1000)
MAX_ATTEMPTS = 1000
DEFAULT_DELAY = timedelta(seconds=1)
DEFAULT_MAX_DELAY = timedelta(hours=1)
STATED_DELAY_SPREAD = 1.25  # a retry-after is spread over [d, 1.25 d]

Backoff = Literal["exponential", "linear", "fixed"]


class ErrorClass(StrEnum):
    TERMINAL = "terminal"
    RETRY_AFTER = "retry-after"
    RETRYABLE = "retryable"


_CLASSES: dict[str, ErrorClass] = {}


def register_error_class(code: str, error_class: ErrorClass) -> None:
    """Classify an error code; a second, different classification of one code is refused."""
    taken = _CLASSES.get(code)
    if taken is not None and taken is not error_class:
        raise ErrorCodeDuplicate(f"{code} is already classified {taken}, not {error_class}")
    _CLASSES[code] = error_class


def classify(code: str | None) -> ErrorClass | None:
    """Answer the class of `code`, or None (unclassified: follow the backoff)."""
    return None if code is None else _CLASSES.get(code)


for _code, _class in {
    "X_STEP_DUPLICATE": ErrorClass.TERMINAL,
    "X_STEP_OUTPUT_INVALID": ErrorClass.TERMINAL,
    # the body's value is what it is: another attempt returns the same
    "X_JOB_RESULT_INVALID": ErrorClass.TERMINAL,
    # a child's stored ending, replayed from the step on every later attempt
    "X_JOB_FAILED": ErrorClass.TERMINAL,
    "X_JOB_INPUT_INVALID": ErrorClass.TERMINAL,
    "X_JOB_TENANT_MISMATCH": ErrorClass.TERMINAL,
    "X_JOB_ROW_STATUS_UNKNOWN": ErrorClass.TERMINAL,
    "X_JOB_DECLARATION_INVALID": ErrorClass.TERMINAL,
    "X_ARGUMENT_INVALID": ErrorClass.TERMINAL,
    "X_EXPORT_PART_TOO_LARGE": ErrorClass.TERMINAL,
    "X_EXPORT_ROW_INVALID": ErrorClass.TERMINAL,
    "X_WEBHOOK_EVENT_INVALID": ErrorClass.TERMINAL,
    "X_BACKFILL_STALLED": ErrorClass.TERMINAL,
    "X_BACKFILL_ENVIRONMENT": ErrorClass.TERMINAL,
    "X_BACKFILL_APPLIED": ErrorClass.TERMINAL,
    "X_BACKFILL_UNKNOWN": ErrorClass.TERMINAL,
    "X_WEBHOOK_DELIVERY_REJECTED": ErrorClass.TERMINAL,
    "X_WEBHOOK_ENDPOINT_DISABLED": ErrorClass.TERMINAL,
    "X_WEBHOOK_ENDPOINT_INVALID": ErrorClass.TERMINAL,
    "X_WEBHOOK_ENDPOINT_UNKNOWN": ErrorClass.TERMINAL,
    "X_WEBHOOK_DELIVERY_FAILED": ErrorClass.RETRYABLE,
    "X_BACKFILL_MIGRATION_PENDING": ErrorClass.RETRYABLE,
    "X_WEBHOOK_DELIVERY_THROTTLED": ErrorClass.RETRY_AFTER,
    "X_JOB_TIMEOUT": ErrorClass.RETRYABLE,
    "X_TIMEOUT": ErrorClass.RETRYABLE,
    "X_DRAINING": ErrorClass.RETRYABLE,
    "X_DRIVER_UNAVAILABLE": ErrorClass.RETRYABLE,
    "X_RATE_LIMITED": ErrorClass.RETRY_AFTER,
    "X_OVERLOADED": ErrorClass.RETRY_AFTER,
}.items():
    register_error_class(_code, _class)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a job gets and how long it waits between them.

    `attempts` counts every attempt (1 means no retry). Equal jitter (on by default) waits a
    random time in [d/2, d], so retries handed out together do not wake together; a time an
    error states (retry-after) is spread over [d, 1.25 d] instead, never before it.
    `dead_letter=False` ends an exhausted job 'failed' (dropped) instead of 'dead'.
    """

    attempts: int = DEFAULT_ATTEMPTS
    backoff: Backoff = "exponential"
    delay: timedelta = DEFAULT_DELAY
    max_delay: timedelta = DEFAULT_MAX_DELAY
    jitter: bool = True
    dead_letter: bool = True

    def __post_init__(self) -> None:
        # every construction is checked, RetryPolicy(...) as much as RetryPolicy.of(...)
        object.__setattr__(
            self,
            "attempts",
            positive_count(self.attempts, field="retry.attempts", most=MAX_ATTEMPTS),
        )
        if self.backoff not in ("exponential", "linear", "fixed"):
            raise DeclarationInvalid(
                f"retry.backoff must be exponential, linear or fixed, got {self.backoff!r}",
                detail={"field": "retry.backoff"},
            )
        for name in ("delay", "max_delay"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise DeclarationInvalid(
                    f"retry.{name} must be a positive timedelta, got {value!r}",
                    detail={"field": f"retry.{name}"},
                )

    @classmethod
    def of(
        cls,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        backoff: Backoff = "exponential",
        delay: Duration = DEFAULT_DELAY,
        max_delay: Duration = DEFAULT_MAX_DELAY,
        jitter: bool = True,
        dead_letter: bool = True,
    ) -> RetryPolicy:
        """Build a policy from user-facing values, refusing any it cannot honour."""
        if backoff not in ("exponential", "linear", "fixed"):
            raise DeclarationInvalid(
                f"retry.backoff must be exponential, linear or fixed, got {backoff!r}",
                detail={"field": "retry.backoff"},
            )
        return cls(
            attempts=positive_count(attempts, field="retry.attempts", most=MAX_ATTEMPTS),
            backoff=backoff,
            delay=parse_duration(delay, field="retry.delay"),
            max_delay=parse_duration(max_delay, field="retry.max_delay"),
            jitter=bool(jitter),
            dead_letter=bool(dead_letter),
        )

    def base_delay(self, attempt: int) -> timedelta:
        """The delay after failed attempt `attempt` (1-based), before jitter, clamped."""
        # in float seconds, clamped before it becomes a timedelta: no attempt number overflows
        step = self.delay.total_seconds()
        if self.backoff == "exponential":
            raw = step * 2.0 ** min(attempt - 1, 64)
        elif self.backoff == "linear":
            raw = step * attempt
        else:
            raw = step
        return timedelta(seconds=min(raw, self.max_delay.total_seconds()))

    def schedule(self) -> list[timedelta]:
        """Every delay ahead of a fresh job, before jitter: attempts - 1 of them."""
        return [self.base_delay(attempt) for attempt in range(1, self.attempts)]

    def delay_after(
        self,
        attempt: int,
        *,
        retry_after: timedelta | None = None,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> timedelta:
        """The wait before the next attempt, honouring a stated retry-after (clamped too)."""
        if retry_after is not None:
            # a stated time is a floor: spread later, never earlier than the other side asked
            stated = min(retry_after, self.max_delay).total_seconds()
            if not self.jitter:
                return timedelta(seconds=stated)
            return timedelta(seconds=uniform(stated, stated * STATED_DELAY_SPREAD))
        base = self.base_delay(attempt)
        if not self.jitter:
            return base
        seconds = base.total_seconds()
        return timedelta(seconds=uniform(seconds / 2, seconds))
