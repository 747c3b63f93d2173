"""One error hierarchy: every durajobs error carries its stable `X_*` code.

Codes raised by the SQL functions also carry the SQLSTATE the database raises them with, so a
psql user and a Python user read the same code. Each code's SQLSTATE and fixes come from one
catalogue, `error_codes.toml` beside this module, which also writes the SQL functions' registry
(`scripts/sync-error-codes`). `from_database_error` is the one place a driver error becomes a
durajobs error.
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from typing import Any, ClassVar

import psycopg

_BY_CODE: dict[str, type[DurajobsError]] = {}
_BY_SQLSTATE: dict[str, type[DurajobsError]] = {}

# where each catalogued code has its section, anchored by the code in lower case
ERRORS_DOC = "docs/errors.md"

CATALOGUE: dict[str, dict[str, str]] = tomllib.loads(
    resources.files("durajobs").joinpath("error_codes.toml").read_text()
)


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


def _fill_from_catalogue(cls: type[DurajobsError]) -> None:
    """Give a durajobs class its SQLSTATE and fixes from the catalogue, which alone holds them."""
    entry = CATALOGUE.get(cls.code) if "code" in cls.__dict__ else None
    if entry is None:
        return  # an application's own error class keeps what it declares
    if entry["class"] != cls.__name__:
        raise ErrorCodeDuplicate(f"{cls.code} belongs to {entry['class']} (error_codes.toml)")
    if {"fix", "sqlstate", "when", "docs"} & cls.__dict__.keys():
        raise TypeError(f"{cls.__name__}: its fix and SQLSTATE come from error_codes.toml")
    cls.sqlstate = entry.get("sqlstate")
    cls.when = entry["when"]
    cls.fix = entry["fix"]
    cls.shell_fix = entry.get("shell_fix")
    cls.docs = f"{ERRORS_DOC}#{cls.code.lower()}"


class DurajobsError(Exception):
    """Base of every durajobs error; `code` is stable, `fix` is one line to run about it.

    `when` says in words what raised it, `docs` names its section of docs/errors.md.
    `shell_fix`, where set, is the line for a user of the `durajobs` command; it may name
    fields of the error's detail in braces (`durajobs jobs show {id}`).
    """

    code: ClassVar[str] = "X_DURAJOBS"
    sqlstate: ClassVar[str | None] = None
    when: ClassVar[str] = ""
    fix: ClassVar[str] = ""
    shell_fix: ClassVar[str | None] = None
    docs: ClassVar[str | None] = None

    def __init__(
        self, message: str, *, detail: dict[str, Any] | None = None, hint: str | None = None
    ) -> None:
        text = message if message.startswith(self.code) else f"{self.code}: {message}"
        super().__init__(text)
        self.detail: dict[str, Any] = dict(detail or {})
        self.hint: str = hint or self.fix

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _fill_from_catalogue(cls)
        register(cls)


class ErrorCodeDuplicate(DurajobsError):
    """Two error classes claimed one code (or one SQLSTATE)."""

    code = "X_ERROR_CODE_DUPLICATE"


def registered_errors() -> dict[str, type[DurajobsError]]:
    """Return every registered error class by code."""
    return dict(_BY_CODE)


class ArgumentInvalid(DurajobsError, ValueError):
    code = "X_ARGUMENT_INVALID"


class JobInputInvalid(DurajobsError, ValueError):
    code = "X_JOB_INPUT_INVALID"


class IdempotencyRequired(DurajobsError, ValueError):
    code = "X_IDEMPOTENCY_REQUIRED"


class JobDuplicate(DurajobsError):
    code = "X_JOB_DUPLICATE"


class DriverUnavailable(DurajobsError):
    code = "X_DRIVER_UNAVAILABLE"


class ClaimQueuesEmpty(DurajobsError, ValueError):
    code = "X_JOB_CLAIM_QUEUES_EMPTY"


class JobLeaseLost(DurajobsError):
    code = "X_JOB_LEASE_LOST"


class JobSlotLost(JobLeaseLost):
    """A limited run's place was taken back while it ran: in durajobs the running row is its own
    place under every limit, so the place goes exactly when the lease does."""

    code = "X_JOB_SLOT_LOST"


class JobCancelled(DurajobsError):
    code = "X_JOB_CANCELLED"


class StepDuplicate(DurajobsError):
    code = "X_STEP_DUPLICATE"


class JobRowStatusUnknown(DurajobsError):
    code = "X_JOB_ROW_STATUS_UNKNOWN"


class JobNotFound(DurajobsError, LookupError):
    code = "X_JOB_NOT_FOUND"


class JobNotRequeueable(DurajobsError):
    code = "X_JOB_NOT_REQUEUEABLE"


class JobNotCancellable(DurajobsError):
    code = "X_JOB_NOT_CANCELLABLE"


class JobPageInvalid(DurajobsError, ValueError):
    code = "X_JOB_PAGE_INVALID"


class JobNotRemovable(DurajobsError):
    code = "X_JOB_NOT_REMOVABLE"


class JobNotPromotable(DurajobsError):
    code = "X_JOB_NOT_PROMOTABLE"


class JobNotDrainable(DurajobsError):
    code = "X_JOB_NOT_DRAINABLE"


class SchemaVersionMismatch(DurajobsError):
    """The database's jobs schema is missing or not the version this package speaks."""

    code = "X_SCHEMA_VERSION_MISMATCH"


# Postgres' own refusal (42501), raised before any durajobs function runs: the login holds none
# of the durajobs roles, so it may not even use the schema
INSUFFICIENT_PRIVILEGE = "42501"


def _refused_by_postgres(error: psycopg.Error) -> PermissionDenied:
    message = error.diag.message_primary or str(error)
    translated = PermissionDenied(
        f"X_PERMISSION_DENIED: {message}",
        detail={"sqlstate": INSUFFICIENT_PRIVILEGE},
        hint="connect as a login granted durajobs_enqueuer, durajobs_worker or durajobs_operator "
        "(made by `durajobs roles`, see docs/operations.md, Security)",
    )
    translated.__cause__ = error
    return translated


def from_database_error(error: psycopg.Error) -> Exception:
    """Translate a driver error into its durajobs class, or hand it back unchanged.

    Reads the SQLSTATE and the structured detail the SQL functions attach; never parses the
    message text.
    """
    sqlstate = error.sqlstate
    if sqlstate == INSUFFICIENT_PRIVILEGE:
        return _refused_by_postgres(error)
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


class PermissionDenied(DurajobsError, PermissionError):
    code = "X_PERMISSION_DENIED"


class JobDeclarationConflict(DurajobsError):
    code = "X_JOB_DECLARATION_CONFLICT"


class JobConcurrencyUnenforceable(DurajobsError):
    """A worker's code declares a concurrency limit the catalogue does not hold, so the claim,
    which enforces the stored declaration, would not enforce it: the worker refuses to start."""

    code = "X_JOB_CONCURRENCY_UNENFORCEABLE"


class JobTenantMismatch(DurajobsError, ValueError):
    """The tenant a run acts for is not the one its input names (terminal: retrying cannot fix
    a stored row)."""

    code = "X_JOB_TENANT_MISMATCH"


class TenancyActorOrgRequired(DurajobsError, ValueError):
    code = "X_TENANCY_ACTOR_ORG_REQUIRED"


class JobKeyBusy(DurajobsError):
    """Stored as a refused run's last_error_code: another run held its concurrency key."""

    code = "X_JOB_KEY_BUSY"


class JobOnSettledFailed(DurajobsError):
    """Reported (logged, never raised) when a job's on_settled hook failed its every try."""

    code = "X_JOB_ON_SETTLED_FAILED"


class StepOutputInvalid(DurajobsError):
    code = "X_STEP_OUTPUT_INVALID"


class Aborted(DurajobsError):
    """The attempt was cancelled (deadline, drain, lease loss, operator cancel): stop writing."""

    code = "X_ABORTED"


class JobTimeout(DurajobsError):
    code = "X_JOB_TIMEOUT"


class Draining(DurajobsError):
    code = "X_DRAINING"


class JobMaxAttempts(DurajobsError):
    code = "X_JOB_MAX_ATTEMPTS"


class ConfigInvalid(DurajobsError, ValueError):
    code = "X_CONFIG_INVALID"


class OutboxNoTransaction(DurajobsError):
    code = "X_OUTBOX_NO_TX"


class Invariant(DurajobsError, ValueError):
    code = "X_INVARIANT"


class DeclarationInvalid(DurajobsError, ValueError):
    code = "X_JOB_DECLARATION_INVALID"


class ExportPartTooLarge(DurajobsError):
    """A page of an export encoded past max_part_bytes: lower the export's batch."""

    code = "X_EXPORT_PART_TOO_LARGE"


class ExportRowInvalid(DurajobsError):
    """An export's row() answered a key its columns do not name, or a value no cell holds."""

    code = "X_EXPORT_ROW_INVALID"


class WebhookEventInvalid(DurajobsError, ValueError):
    """A webhook's event id or topic cannot be signed unambiguously."""

    code = "X_WEBHOOK_EVENT_INVALID"


class BackfillPending(DurajobsError):
    """A declared backfill is not swept in this environment: a deploy gate stops here."""

    code = "X_BACKFILL_PENDING"


class BackfillApplied(DurajobsError):
    """A backfill's pass completed already: only --force runs it again."""

    code = "X_BACKFILL_APPLIED"


class BackfillRunning(DurajobsError):
    """A pass of the backfill is live: it is the pass; wait for it."""

    code = "X_BACKFILL_RUNNING"


class BackfillUnknown(DurajobsError):
    """No backfill of that name is declared in the registry."""

    code = "X_BACKFILL_UNKNOWN"


class BackfillStalled(DurajobsError):
    """The source ran out while the backfill's count still found rows to do."""

    code = "X_BACKFILL_STALLED"


class BackfillEnvironment(DurajobsError):
    """The backfill does not run in this environment."""

    code = "X_BACKFILL_ENVIRONMENT"


class BackfillMigrationPending(DurajobsError):
    """The application's migration a backfill requires is not applied."""

    code = "X_BACKFILL_MIGRATION_PENDING"


class WebhookDeliveryFailed(DurajobsError):
    """The endpoint answered 5xx, or the request failed on the network: retried."""

    code = "X_WEBHOOK_DELIVERY_FAILED"


class WebhookDeliveryRejected(DurajobsError):
    """The endpoint answered 4xx (or a redirect): the delivery ends dead."""

    code = "X_WEBHOOK_DELIVERY_REJECTED"


class WebhookDeliveryThrottled(DurajobsError):
    """The endpoint asked for time (429, or 503 with Retry-After): retried when it said."""

    code = "X_WEBHOOK_DELIVERY_THROTTLED"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None,
        detail: dict[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, detail=detail, hint=hint)
        self.retry_after = retry_after  # seconds, read by the retry policy; None: its backoff


class WebhookEndpointDisabled(DurajobsError):
    """The endpoint was disabled after consecutive failures: no request is sent."""

    code = "X_WEBHOOK_ENDPOINT_DISABLED"


class WebhookEndpointInvalid(DurajobsError):
    """The application's endpoint lookup answered something no request can go to."""

    code = "X_WEBHOOK_ENDPOINT_INVALID"


class WebhookEndpointUnknown(DurajobsError):
    """The application's endpoint lookup knows no endpoint of that id."""

    code = "X_WEBHOOK_ENDPOINT_UNKNOWN"


class DatabaseUrlMissing(DurajobsError):
    code = "X_DATABASE_URL_MISSING"


class EmbeddedUnavailable(DurajobsError):
    code = "X_EMBEDDED_UNAVAILABLE"


def error_codes_sql() -> str:
    """The insert of every SQL-raised code into jobs.error_codes, as 010_util.sql holds it."""

    def quoted(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    rows = [
        f"  ({quoted(code)}, {quoted(entry['sqlstate'])},\n   {quoted(entry['fix'])})"
        for code, entry in CATALOGUE.items()
        if "sqlstate" in entry
    ]
    return "insert into jobs.error_codes (code, sqlstate, fix) values\n" + ",\n".join(rows) + ";\n"


def error_codes_markdown() -> str:
    """docs/errors.md: a section a code, anchored by the code, written from the catalogue."""
    lines = [
        "# Error codes",
        "",
        "<!-- written by scripts/sync-error-codes from python/durajobs/error_codes.toml;"
        " edit that file, not this one -->",
        "",
        "Every error durajobs raises carries a stable `X_*` code, from SQL (in the message and"
        " the detail's `code`, with the SQLSTATE below) and from Python (`error.code`, and the"
        " class below). Its fix is one line to run: the hint of a SQL error, `error.fix` in"
        " Python, the `fix:` line of the `durajobs` command (which gives the command's own line"
        " where one is listed). `<placeholders>` are yours to fill; `{fields}` are filled from"
        " the error's detail.",
        "",
        "| Code | SQLSTATE | Python class |",
        "|---|---|---|",
    ]
    for code, entry in sorted(CATALOGUE.items()):
        sqlstate = f"`{entry['sqlstate']}`" if "sqlstate" in entry else "(Python only)"
        lines.append(f"| [`{code}`](#{code.lower()}) | {sqlstate} | `durajobs.{entry['class']}` |")
    for code, entry in sorted(CATALOGUE.items()):
        raised = f"SQLSTATE `{entry['sqlstate']}`" if "sqlstate" in entry else "Python only"
        lines += ["", f"### {code}", "", f"{raised}, `durajobs.{entry['class']}`.", ""]
        lines += [entry["when"], "", "```", entry["fix"], "```"]
        if "shell_fix" in entry:
            lines += ["", "From the `durajobs` command:", "", "```", entry["shell_fix"], "```"]
    return "\n".join(lines) + "\n"


class JobResultTimeout(DurajobsError, TimeoutError):
    code = "X_JOB_RESULT_TIMEOUT"


class JobFailed(DurajobsError):
    code = "X_JOB_FAILED"


class JobResultInvalid(DurajobsError, ValueError):
    code = "X_JOB_RESULT_INVALID"


class JobUncommitted(DurajobsError):
    code = "X_JOB_UNCOMMITTED"
