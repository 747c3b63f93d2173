"""One error hierarchy: every durajobs error carries its stable `X_*` code.

Codes raised by the SQL functions also carry the SQLSTATE the database raises them with, so a
psql user and a Python user read the same code. `from_database_error` is the one place a driver
error becomes a durajobs error.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import psycopg

_BY_CODE: dict[str, type[DurajobsError]] = {}
_BY_SQLSTATE: dict[str, type[DurajobsError]] = {}


def register(cls: type[DurajobsError]) -> type[DurajobsError]:
    """Register an error class under its code (and SQLSTATE); a second claimant raises."""
    if "code" not in cls.__dict__:
        return cls
    taken = _BY_CODE.get(cls.code)
    if taken is not None and taken is not cls:
        raise ErrorCodeDuplicate(f"{cls.code} is already registered by {taken.__qualname__}")
    if cls.sqlstate is not None:
        taken = _BY_SQLSTATE.get(cls.sqlstate)
        if taken is not None and taken is not cls:
            raise ErrorCodeDuplicate(
                f"SQLSTATE {cls.sqlstate} is already registered by {taken.__qualname__}"
            )
        _BY_SQLSTATE[cls.sqlstate] = cls
    _BY_CODE[cls.code] = cls
    return cls


class DurajobsError(Exception):
    """Base of every durajobs error; `code` is stable, `fix` says what to do."""

    code: ClassVar[str] = "X_DURAJOBS"
    sqlstate: ClassVar[str | None] = None
    fix: ClassVar[str] = ""

    def __init__(
        self, message: str, *, detail: dict[str, Any] | None = None, hint: str | None = None
    ) -> None:
        text = message if message.startswith(self.code) else f"{self.code}: {message}"
        super().__init__(text)
        self.detail: dict[str, Any] = dict(detail or {})
        self.hint: str = hint or self.fix

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register(cls)


class ErrorCodeDuplicate(DurajobsError):
    """Two error classes claimed one code (or one SQLSTATE)."""

    code = "X_ERROR_CODE_DUPLICATE"
    fix = "give the new error class a code of its own"


def registered_errors() -> dict[str, type[DurajobsError]]:
    """Return every registered error class by code."""
    return dict(_BY_CODE)


class ArgumentInvalid(DurajobsError, ValueError):
    code = "X_ARGUMENT_INVALID"
    sqlstate = "JQ001"
    fix = "pass the argument the error names with a valid value (see docs/sql.md)"


class JobInputInvalid(DurajobsError, ValueError):
    code = "X_JOB_INPUT_INVALID"
    sqlstate = "JQ002"
    fix = "pass input as a JSON object, e.g. input => '{\"user_id\": 1}'::jsonb"


class IdempotencyRequired(DurajobsError, ValueError):
    code = "X_IDEMPOTENCY_REQUIRED"
    sqlstate = "JQ003"
    fix = "pass idempotency_key => a string that names this unit of work, e.g. 'invoice:42'"


class JobDuplicate(DurajobsError):
    code = "X_JOB_DUPLICATE"
    sqlstate = "JQ004"
    fix = "use on_conflict => 'dedupe' to receive the live job, or wait for it to finish"


class DriverUnavailable(DurajobsError):
    code = "X_DRIVER_UNAVAILABLE"
    sqlstate = "JQ005"
    fix = "run `durajobs migrate` so the idempotency index exists, then retry"


class ClaimQueuesEmpty(DurajobsError, ValueError):
    code = "X_JOB_CLAIM_QUEUES_EMPTY"
    sqlstate = "JQ006"
    fix = "pass queues => array['default'] naming at least one queue"


class JobLeaseLost(DurajobsError):
    code = "X_JOB_LEASE_LOST"
    sqlstate = "JQ007"
    fix = "stop this attempt: another claim owns the job now and will finish it"


class JobCancelled(DurajobsError):
    code = "X_JOB_CANCELLED"
    sqlstate = "JQ008"
    fix = "stop this attempt: the job was cancelled (jobs.cancel)"


class StepDuplicate(DurajobsError):
    code = "X_STEP_DUPLICATE"
    sqlstate = "JQ009"
    fix = "give every step of one run a distinct name"


class JobRowStatusUnknown(DurajobsError):
    code = "X_JOB_ROW_STATUS_UNKNOWN"
    sqlstate = "JQ010"
    fix = "upgrade durajobs to the release that wrote this status, or run `durajobs migrate`"


class JobNotFound(DurajobsError, LookupError):
    code = "X_JOB_NOT_FOUND"
    sqlstate = "JQ011"
    fix = "check the id: select id, name, state from jobs.jobs where id = ..."


class JobNotRequeueable(DurajobsError):
    code = "X_JOB_NOT_REQUEUEABLE"
    sqlstate = "JQ012"
    fix = "only a finished job requeues: wait for it, or jobs.cancel(id => ...) it first"


class JobNotCancellable(DurajobsError):
    code = "X_JOB_NOT_CANCELLABLE"
    sqlstate = "JQ013"
    fix = "only a live job cancels; a finished one stays as it ended (jobs.requeue runs it again)"


class JobPageInvalid(DurajobsError, ValueError):
    code = "X_JOB_PAGE_INVALID"
    sqlstate = "JQ014"
    fix = "pass page_size from 1 to 200, and after or before (not both) with an id a page answered"


class JobNotRemovable(DurajobsError):
    code = "X_JOB_NOT_REMOVABLE"
    sqlstate = "JQ015"
    fix = "cancel the running job first (jobs.cancel), then remove it"


class JobNotPromotable(DurajobsError):
    code = "X_JOB_NOT_PROMOTABLE"
    sqlstate = "JQ016"
    fix = "only a delayed job, or a ready one backing off, can be made due now"


class SchemaVersionMismatch(DurajobsError):
    """The database's jobs schema is missing or not the version this package speaks."""

    code = "X_SCHEMA_VERSION_MISMATCH"
    fix = "durajobs migrate --database-url $DATABASE_URL"


def from_database_error(error: psycopg.Error) -> Exception:
    """Translate a driver error into its durajobs class, or hand it back unchanged.

    Reads the SQLSTATE and the structured detail the SQL functions attach; never parses the
    message text.
    """
    sqlstate = error.sqlstate
    cls = _BY_SQLSTATE.get(sqlstate) if sqlstate else None
    if cls is None:
        return error
    diagnostic = error.diag
    detail: dict[str, Any] = {}
    if diagnostic.message_detail:
        try:
            parsed = json.loads(diagnostic.message_detail)
        except ValueError:
            parsed = {"text": diagnostic.message_detail}
        if isinstance(parsed, dict):
            detail = parsed
    translated = cls(
        diagnostic.message_primary or str(error), detail=detail, hint=diagnostic.message_hint
    )
    translated.__cause__ = error
    return translated


class JobTenantRequired(DurajobsError, ValueError):
    code = "X_JOB_TENANT_REQUIRED"
    fix = "declare tenant=lambda input: input.org_id, or tenant='none' for a job with no tenant"


class StepOutputInvalid(DurajobsError):
    code = "X_STEP_OUTPUT_INVALID"
    fix = "return JSON-serialisable data from the step (dicts, lists, str, numbers, bools, None)"


class Aborted(DurajobsError):
    """The attempt was cancelled (deadline, drain, lease loss, operator cancel): stop writing."""

    code = "X_ABORTED"
    fix = "stop this attempt; durable writes after a cancel are refused"


class JobTimeout(DurajobsError):
    code = "X_JOB_TIMEOUT"
    fix = "raise the job's timeout or step_timeout, or make the work honour ctx.cancelled"


class Draining(DurajobsError):
    code = "X_DRAINING"
    fix = "nothing: the worker is shutting down and the job goes back to the queue uncounted"


class JobMaxAttempts(DurajobsError):
    code = "X_JOB_MAX_ATTEMPTS"
    fix = "fix the cause, then select jobs.requeue(id => '<job id>')"


class ConfigInvalid(DurajobsError, ValueError):
    code = "X_CONFIG_INVALID"
    fix = "pass a whole number of at least 1 (or leave the setting out for its default)"


class OutboxNoTransaction(DurajobsError):
    code = "X_OUTBOX_NO_TX"
    fix = "pass using=session, or enqueue inside `with durajobs.in_transaction(session):`"


class Invariant(DurajobsError, ValueError):
    code = "X_INVARIANT"
    fix = "pass a positive, finite, whole number of milliseconds"
