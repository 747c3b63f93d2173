"""Job declarations: `Registry.job(...)` turns a handler into a `Job`, the handle users enqueue.

Everything a declaration says is checked when it is declared: a missing idempotency key or
tenant, a duplicate name or an impossible number fails at import time, not at 3 a.m.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypedDict, TypeVar, Unpack
from uuid import UUID

from pydantic import BaseModel, ValidationError

from durajobs._db import calls
from durajobs._db.transactions import open_transaction_probe
from durajobs._values.durations import Duration, parse_duration
from durajobs._values.records import Declared, EnqueueResult
from durajobs._values.storable import json_text
from durajobs.declare.backfill import (
    DEFAULT_BACKFILL_BATCH,
    DEFAULT_BACKFILL_RATE,
    Backfill,
    BackfillInput,
    Handle,
    plan_backfill,
)
from durajobs.declare.cron import DEFAULT_MAX_CATCH_UP, CatchUp, Entries, Task, declare_task
from durajobs.declare.enqueue import EnqueueRequest, OnConflict
from durajobs.declare.export import (
    DEFAULT_EXPORT_BATCH,
    DEFAULT_MAX_PART_BYTES,
    ExportFormat,
    ExportSink,
    Page,
    plan_export,
)
from durajobs.declare.handle import JobHandle
from durajobs.declare.limits import Concurrency, Limit, parse_concurrency
from durajobs.declare.retry import RetryPolicy
from durajobs.declare.router import Router
from durajobs.declare.webhook import (
    DEFAULT_DISABLE_AFTER,
    DEFAULT_REQUEST_TIMEOUT,
    EndpointLookup,
    Webhook,
    WebhookEvent,
    delivery_key,
)
from durajobs.errors import (
    ArgumentInvalid,
    DeclarationInvalid,
    IdempotencyRequired,
    JobDuplicate,
    JobInputInvalid,
    JobResultInvalid,
    JobTenantMismatch,
    JobTenantRequired,
    TenancyActorOrgRequired,
)
from durajobs.observe.tracing import current_traceparent

# the default 'step_output' size limit (011_bounds.sql), which bounds a result too
DEFAULT_RESULT_BYTES = 1_048_576

# how often `step.wait_for_event` re-reads the table when no wake arrives
DEFAULT_EVENT_POLL = timedelta(seconds=30)

I = TypeVar("I", bound=BaseModel)  # noqa: E741 - the input model, as in Job[I]
T = TypeVar("T")

DEFAULT_QUEUE = "default"
# the bounds jobs.declare_job and jobs.enqueue hold every name and priority to (011_bounds.sql)
MAX_NAME_LENGTH = 200
MAX_PRIORITY = 1000
NO_TENANT: Literal["none"] = "none"

Handler = Callable[[Any], Any] | Callable[[Any], Awaitable[Any]]
# a psycopg connection, a SQLAlchemy Session/Connection (or their async forms), or a Client
Using = object


class EnqueueOptions(TypedDict, total=False):
    """The per-call options of an enqueue's request (a misspelt one is a TypeError)."""

    delay: Duration | None
    run_at: datetime | None
    queue: str | None
    run_id: UUID | None
    on_conflict: OnConflict
    priority: int | None


class Actor(Protocol):
    """Who enqueues: `id` is stamped as enqueued_by, `org_id` as the job's tenant."""

    @property
    def id(self) -> str: ...

    @property
    def org_id(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Settled:
    """What on_settled receives, once per ending, after the settle landed."""

    job: str
    job_id: UUID
    run_id: UUID
    outcome: str
    attempt: int
    error: str | None = None
    code: str | None = None
    input: Any = None  # the stored input, as JSON
    result: Any = None  # what the handler returned, for a completed ending
    # the run's context: its tenant (None for a tenantless job) and the queue it ran on
    tenant_id: str | None = None
    queue: str | None = None


@dataclass(eq=False)
class Job(Generic[I]):
    """A declared job: its durable name, its rules, and its handler."""

    name: str
    queue: str
    input_model: type[I]
    idempotency_key: Callable[[I], str]
    tenant: Callable[[I], str | None] | Literal["none"]
    retry: RetryPolicy
    timeout: timedelta | None
    step_timeout: timedelta | None
    event_poll: timedelta
    on_settled: Callable[[Settled], Any] | None
    handler: Handler
    registry: Registry = field(repr=False)
    priority: int = 0  # an enqueue's default; lower runs first
    concurrency: Limit | None = None  # at most this many running across the fleet
    output_model: type[BaseModel] | None = None  # what the body returns, validated when given

    @property
    def is_async(self) -> bool:
        """An `async def` handler, seen through functools.wraps wrappers and __call__."""
        # asked a few times an attempt; the handler never changes, so it is worked out once
        known = self.__dict__.get("_is_async")
        if known is None:
            known = self.__dict__["_is_async"] = _is_async(self.handler)
        return bool(known)

    def parse(self, input: I | Mapping[str, Any]) -> I:
        """Validate `input` against the input model; raise X_JOB_INPUT_INVALID naming the field."""
        if isinstance(input, self.input_model):
            return input
        try:
            return self.input_model.model_validate(input)
        except ValidationError as invalid:
            raise self._invalid(invalid) from None

    def parse_json(self, text: str | bytes) -> I:
        """Validate a JSON text (a claimed row's input) against the input model, parsed by
        pydantic itself; raise X_JOB_INPUT_INVALID naming the field."""
        try:
            # the model's own validator, as model_validate_json calls it: that method's checks
            # of its keyword arguments cost as much again as validating a small input
            validated: I = self.input_model.__pydantic_validator__.validate_json(text)
            return validated
        except ValidationError as invalid:
            raise self._invalid(invalid) from None

    def _invalid(self, invalid: ValidationError) -> JobInputInvalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "input"
        return JobInputInvalid(
            f"job {self.name}: input field {where!r}: {first['msg']}",
            detail={
                "job": self.name,
                "field": where,
                "errors": invalid.errors(include_url=False),
            },
        )

    def stored_result(self, value: Any) -> Any:
        """What the body returned, as the JSON the ack stores: validated and dumped by the
        declared output model, else as JSON reads it back (a tuple becomes a list). Raises
        X_JOB_RESULT_INVALID for a value that is neither."""
        if value is None:
            return None
        if self.output_model is not None:
            try:
                model = (
                    value
                    if isinstance(value, self.output_model)
                    else self.output_model.model_validate(value)
                )
            except ValidationError as invalid:
                first = invalid.errors()[0]
                raise JobResultInvalid(
                    f"job {self.name}: the result does not validate against "
                    f"{self.output_model.__name__}: {first['msg']}",
                    detail={"job": self.name, "errors": invalid.errors(include_url=False)},
                ) from None
            value = model.model_dump(mode="json")
        try:
            # what jsonb refuses would fail the whole batch of acks it was sent with
            text = json_text(value)
            size = len(text.encode("utf-8"))
            if size > DEFAULT_RESULT_BYTES:
                # the database holds a lowered limit too, and fails such a row there
                raise ValueError(
                    f"it is {size} bytes as JSON, over the {DEFAULT_RESULT_BYTES} bytes "
                    "of the step_output size limit"
                )
            return json.loads(text)
        except (TypeError, ValueError) as invalid:
            raise JobResultInvalid(
                f"job {self.name} returned {type(value).__name__}, which is not JSON: {invalid}",
                detail={"job": self.name, "type": type(value).__name__},
            ) from None

    def read_result(self, stored: Any) -> Any:
        """A stored result as the awaiting caller gets it: the output model when declared."""
        if self.output_model is None or stored is None:
            return stored
        return self.output_model.model_validate(stored)

    def request(
        self,
        input: I | Mapping[str, Any],
        *,
        delay: Duration | None = None,
        run_at: datetime | None = None,
        queue: str | None = None,
        run_id: UUID | None = None,
        on_conflict: OnConflict = "dedupe",
        priority: int | None = None,
        actor: Actor | None = None,
    ) -> EnqueueRequest:
        """The checked request an enqueue of `input` sends: X_JOB_INPUT_INVALID naming the
        field, X_IDEMPOTENCY_REQUIRED for an empty key, X_ARGUMENT_INVALID for a naive run_at
        or a concurrency key that is empty or longer than 200 characters."""
        model = self.parse(input)
        key = self.idempotency_key(model)
        if not isinstance(key, str) or not key.strip():
            raise IdempotencyRequired(
                f"job {self.name}: idempotency_key answered {key!r}; it must be a non-empty string",
                detail={"job": self.name},
            )
        tenant_id = None if self.tenant == NO_TENANT else self.tenant(model)
        enqueued_by = None
        if actor is not None:
            enqueued_by = actor.id
            if self.tenant == NO_TENANT:
                # the actor's org is the only tenant such a job can act for
                if not actor.org_id:
                    raise TenancyActorOrgRequired(
                        f"job {self.name} has no tenant of its own, and actor {actor.id!r} "
                        "belongs to no org",
                        detail={"job": self.name, "actor": actor.id},
                    )
                tenant_id = actor.org_id
            elif actor.org_id != tenant_id:
                raise JobTenantMismatch(
                    f"job {self.name}: actor {actor.id!r} acts for org {actor.org_id!r}, the "
                    f"input names tenant {tenant_id!r}",
                    detail={"job": self.name, "actor_org": actor.org_id, "tenant": tenant_id},
                )
        if delay is not None and run_at is not None:
            raise DeclarationInvalid("pass delay or run_at, not both", detail={"job": self.name})
        if run_at is not None and run_at.tzinfo is None:
            raise ArgumentInvalid(
                f"job {self.name}: run_at {run_at.isoformat()} has no time zone; pass an aware "
                "datetime (e.g. datetime.now(UTC) + timedelta(hours=1))",
                detail={"job": self.name, "argument": "run_at"},
            )
        if delay is not None and delay not in (0, timedelta(0)):
            run_at = datetime.now(UTC) + parse_duration(delay, field="delay")
        return EnqueueRequest(
            name=self.name,
            input=model.model_dump(mode="json"),
            idempotency_key=key,
            queue=queue or self.queue,
            max_attempts=self.retry.attempts,
            tenant_id=tenant_id,
            run_at=run_at,
            priority=self.priority if priority is None else priority,
            run_id=run_id,
            on_conflict=on_conflict,
            enqueued_by=enqueued_by,
            traceparent=current_traceparent(),
            concurrency_key=(
                None if self.concurrency is None else self.concurrency.key_of(self.name, model)
            ),
        )

    def enqueue(
        self,
        input: I | Mapping[str, Any],
        *,
        using: Using = None,
        outbox: bool = True,
        **options: Unpack[EnqueueOptions],
    ) -> JobHandle:
        """Put one run of this job on the queue; never runs the handler here.

        Runs on `using` (a psycopg connection joins its transaction) or the registry's database.
        Options: delay or run_at, queue, run_id, on_conflict ('dedupe' or 'error'), priority;
        `outbox=False` publishes to the queue directly even inside a transaction.
        Answers a JobHandle: (id, run_id, deduped), and `result()`/`wait()` for what the job
        returns. Raises X_JOB_INPUT_INVALID and the SQL errors.
        """
        request = self.request(input, **options)
        router = self.registry.router
        return self._handle(router.send(request, using, outbox=outbox), using, outbox)

    async def enqueue_async(
        self,
        input: I | Mapping[str, Any],
        *,
        using: Using = None,
        outbox: bool = True,
        **options: Unpack[EnqueueOptions],
    ) -> JobHandle:
        """Async form of `enqueue`."""
        request = self.request(input, **options)
        answer = await self.registry.router.send_async(request, using, outbox=outbox)
        return self._handle(answer, using, outbox)

    def as_(
        self,
        actor: Actor,
        input: I | Mapping[str, Any],
        *,
        using: Using = None,
        outbox: bool = True,
        **options: Unpack[EnqueueOptions],
    ) -> JobHandle:
        """Enqueue on behalf of `actor`: its org is the tenant, its id the enqueued_by."""
        request = self.request(input, actor=actor, **options)
        return self._handle(self.registry.router.send(request, using, outbox=outbox), using, outbox)

    async def as_async(
        self,
        actor: Actor,
        input: I | Mapping[str, Any],
        *,
        using: Using = None,
        outbox: bool = True,
        **options: Unpack[EnqueueOptions],
    ) -> JobHandle:
        """Async form of `as_`."""
        request = self.request(input, actor=actor, **options)
        answer = await self.registry.router.send_async(request, using, outbox=outbox)
        return self._handle(answer, using, outbox)

    def _handle(self, answer: EnqueueResult, using: Using, outbox: bool) -> JobHandle:
        """The handle of an enqueue that went where `route` sent it."""
        route = self.registry.router.route(using, outbox=outbox)
        return JobHandle(
            answer.id,
            answer.run_id,
            answer.deduped,
            job=self,
            database_url=self.registry.database_url,
            staged=route.staged,
            open_transaction=open_transaction_probe(route.transaction),
        )

    def declaration(self, *, declared_by: str, replace: bool = False) -> calls.Call[Declared]:
        """The `jobs.declare_job` call that puts this declaration in the database's catalogue,
        so an enqueue from SQL or another language gets its queue, attempts, priority and
        tenant rule. `replace=True` is the operator's word that it wins over a different one."""
        described = self.describe()
        return calls.declare_job(
            self.name,
            queue=self.queue,
            max_attempts=self.retry.attempts,
            priority=self.priority,
            tenant_required=self.tenant != NO_TENANT,
            declared_by=declared_by,
            retry=described["retry"],
            timeout=self.timeout,
            input_schema=described["input"],
            replace=replace,
            concurrency=None if self.concurrency is None else self.concurrency.limit,
            concurrency_keyed=self.concurrency is not None and self.concurrency.keyed,
            when_busy="wait" if self.concurrency is None else self.concurrency.when_busy,
        )

    def describe(self) -> dict[str, Any]:
        """A plain description for dashboards and manifests; never the key itself. `steps` is
        always empty: a body's steps are known only when it runs."""
        return {
            "kind": "job",
            "name": self.name,
            "steps": [],
            "queue": self.queue,
            "priority": self.priority,
            "concurrency": (
                None
                if self.concurrency is None
                else {
                    "limit": self.concurrency.limit,
                    "keyed": self.concurrency.keyed,
                    "when_busy": self.concurrency.when_busy,
                }
            ),
            "input": self.input_model.model_json_schema(),
            "idempotent": True,
            "tenant": "none" if self.tenant == NO_TENANT else "from input",
            "retry": {
                "attempts": self.retry.attempts,
                "backoff": self.retry.backoff,
                "delay_seconds": self.retry.delay.total_seconds(),
                "max_delay_seconds": self.retry.max_delay.total_seconds(),
                "jitter": self.retry.jitter,
                "dead_letter": self.retry.dead_letter,
                "schedule_seconds": [d.total_seconds() for d in self.retry.schedule()],
            },
            "timeout_seconds": None if self.timeout is None else self.timeout.total_seconds(),
            "event_poll_seconds": self.event_poll.total_seconds(),
            "step_timeout_seconds": (
                None if self.step_timeout is None else self.step_timeout.total_seconds()
            ),
            "async": self.is_async,
        }


class Registry:
    """The jobs one application declares; the worker reads it (`--app module:registry`)."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        outbox: bool = False,
        mode: Literal["direct", "required"] = "direct",
        redact: Sequence[str] = (),
    ) -> None:
        """`database_url` is the queue's database. `outbox=True`: an enqueue inside a caller's
        transaction stages the job in that database's jobs.outbox for a relay to publish (the
        queue lives elsewhere); otherwise it writes the job itself in the transaction.
        `mode='required'`: an enqueue outside any transaction is X_OUTBOX_NO_TX instead of a
        direct publish. `redact`: more key fragments (e.g. 'ssn') whose values an operator never
        sees in a job's input (jobs.inspect_job; password, token, secret, authorization and
        api_key are hidden already), declared with the jobs."""
        if mode not in ("direct", "required"):
            raise DeclarationInvalid(
                f"mode must be 'direct' or 'required', got {mode!r}", detail={"field": "mode"}
            )
        if isinstance(redact, str) or not all(isinstance(key, str) and key for key in redact):
            raise DeclarationInvalid(
                f"redact must be a list of key fragments, got {redact!r}",
                detail={"field": "redact"},
            )
        self._jobs: dict[str, Job[Any]] = {}
        self._dropped: tuple[str, ...] | None = None  # dropped_when_exhausted(), kept
        self._tasks: dict[str, Task] = {}
        self._backfills: dict[str, Backfill] = {}
        self.redact = tuple(redact)
        self.router = Router(database_url, outbox=outbox, mode=mode)

    @property
    def database_url(self) -> str | None:
        """The queue's database, where enqueues outside a transaction go."""
        return self.router.database_url

    @property
    def outbox(self) -> bool:
        return self.router.outbox

    @property
    def mode(self) -> Literal["direct", "required"]:
        return self.router.mode

    def job(
        self,
        *,
        name: str,
        input: type[I],
        idempotency_key: Callable[[I], str] | None = None,
        tenant: Callable[[I], str | None] | Literal["none"] | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        concurrency: int | Concurrency | None = None,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        step_timeout: Duration | None = None,
        event_poll: Duration = DEFAULT_EVENT_POLL,
        on_settled: Callable[[Settled], Any] | None = None,
        output: type[BaseModel] | None = None,
    ) -> Callable[[Handler], Job[I]]:
        """Declare a job; use as a decorator on its handler, `def run(ctx)` or `async def`.

        What the handler returns is stored with the ack that completes the run (JSON, or an
        `output` pydantic model, validated), for `handle.result()` and `jobs.result`.

        `concurrency=N` runs at most N attempts of the job at once across every worker;
        `concurrency=Concurrency(key=lambda input: ..., limit=N)` at most N per key."""
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
            raise DeclarationInvalid(
                f"a job needs an explicit, non-blank name of at most {MAX_NAME_LENGTH} characters",
                detail={"field": "name"},
            )
        if name in self._jobs:
            raise JobDuplicate(f"a job named {name!r} is already declared", detail={"job": name})
        if not (isinstance(input, type) and issubclass(input, BaseModel)):
            raise DeclarationInvalid(
                f"job {name}: input must be a pydantic model class", detail={"field": "input"}
            )
        if idempotency_key is None or not callable(idempotency_key):
            raise IdempotencyRequired(
                f"job {name} declares no idempotency_key; every enqueue needs one",
                detail={"job": name},
            )
        if tenant is None or (tenant != NO_TENANT and not callable(tenant)):
            raise JobTenantRequired(
                f"job {name} declares no tenant: a function of the input, or 'none'",
                detail={"job": name},
            )
        if not isinstance(queue, str) or not queue.strip() or len(queue) > MAX_NAME_LENGTH:
            raise DeclarationInvalid(
                f"job {name}: queue must be a non-blank name of at most {MAX_NAME_LENGTH} "
                "characters",
                detail={"field": "queue"},
            )
        limit = parse_concurrency(name, concurrency)
        if output is not None and not (isinstance(output, type) and issubclass(output, BaseModel)):
            raise DeclarationInvalid(
                f"job {name}: output must be a pydantic model class", detail={"field": "output"}
            )
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not -MAX_PRIORITY <= priority <= MAX_PRIORITY
        ):
            raise DeclarationInvalid(
                f"job {name}: priority must be an integer from {-MAX_PRIORITY} to {MAX_PRIORITY} "
                f"(lower runs first), got {priority!r}",
                detail={"field": "priority"},
            )

        # every number is checked here, at declaration, before any handler is attached
        attempt_timeout = None if timeout is None else parse_duration(timeout, field="timeout")
        each_step_timeout = (
            None if step_timeout is None else parse_duration(step_timeout, field="step_timeout")
        )
        poll = parse_duration(event_poll, field="event_poll")

        def declare(handler: Handler) -> Job[I]:
            if name in self._jobs:
                raise JobDuplicate(
                    f"a job named {name!r} is already declared", detail={"job": name}
                )
            declared: Job[I] = Job(
                name=name,
                queue=queue,
                input_model=input,
                idempotency_key=idempotency_key,
                tenant=tenant,
                retry=retry or RetryPolicy(),
                timeout=attempt_timeout,
                step_timeout=each_step_timeout,
                event_poll=poll,
                on_settled=on_settled,
                handler=handler,
                registry=self,
                priority=priority,
                concurrency=limit,
                output_model=output,
            )
            self._jobs[name] = declared
            self._dropped = None
            return declared

        return declare

    def export(
        self,
        *,
        name: str,
        input: type[I],
        idempotency_key: Callable[[I], str],
        tenant: Callable[[I], str | None] | Literal["none"],
        prefix: Callable[[I], str],
        source: Callable[[I, Page], Sequence[Any] | Awaitable[Sequence[Any]]],
        key: Callable[[Any], Any],
        columns: Sequence[str],
        row: Callable[[Any], dict[str, Any]],
        sink: Callable[[], ExportSink],
        format: ExportFormat = "csv",
        batch: int = DEFAULT_EXPORT_BATCH,
        max_part_bytes: int = DEFAULT_MAX_PART_BYTES,
        rate: float | None = None,
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
    ) -> Job[I]:
        """Declare an export: a job that reads `source` a keyset page at a time (`batch` rows
        after the `key` of the page before's last row), writes each page through `row` as one
        part under `prefix` (CSV or NDJSON, `columns` in order) to the sink `sink()` answers,
        then a manifest; each page a durable step (declare.export says why each rule holds)."""
        export = plan_export(
            name=name,
            prefix=prefix,
            source=source,
            key=key,
            columns=columns,
            row=row,
            sink=sink,
            format=format,
            batch=batch,
            max_part_bytes=max_part_bytes,
            rate=rate,
        )
        declare = self.job(
            name=name,
            input=input,
            idempotency_key=idempotency_key,
            tenant=tenant,
            queue=queue,
            retry=retry,
        )
        return declare(export.run)

    def backfill(
        self,
        *,
        name: str,
        source: Callable[[Page], Sequence[Any] | Awaitable[Sequence[Any]]],
        key: Callable[[Any], Any],
        handle: Handle,
        count: Callable[[], int | Awaitable[int]] | None = None,
        requires: str | None = None,
        environments: Sequence[str] = (),
        batch: int = DEFAULT_BACKFILL_BATCH,
        rate: float = DEFAULT_BACKFILL_RATE,
        tenant: str = NO_TENANT,
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
    ) -> Job[BackfillInput]:
        """Declare a backfill: a job that reads `source` a keyset page at a time (`batch` rows
        after the `key` of the page before's last row, at most `rate` pages a second) and
        hands each page to `handle(rows, signal)`; each page a durable step, each pass a row of
        the ledger jobs.backfills (declare.backfill says why each rule holds). Its idempotency
        key is its name; `tenant` is the tenant id every pass acts for, or 'none'. Enqueue it
        with `durajobs backfill run NAME --write`, or `job.enqueue({})` (`{"force": true}`
        for a new pass after one completed)."""
        backfill = plan_backfill(
            name=name,
            source=source,
            key=key,
            handle=handle,
            count=count,
            requires=requires,
            environments=environments,
            batch=batch,
            rate=rate,
        )
        if not isinstance(tenant, str) or not tenant.strip():
            raise DeclarationInvalid(
                f"backfill {name}: tenant must be a tenant id or 'none', got {tenant!r}",
                detail={"field": "tenant"},
            )
        declare = self.job(
            name=name,
            input=BackfillInput,
            idempotency_key=lambda _input: name,
            tenant=NO_TENANT if tenant == NO_TENANT else (lambda _input: tenant),
            queue=queue,
            retry=retry,
        )
        job = declare(backfill.run)
        self._backfills[name] = backfill
        return job

    def webhook(
        self,
        *,
        name: str,
        endpoint: EndpointLookup,
        tenant: Callable[[WebhookEvent], str | None] | Literal["none"],
        disable_after: int | None = DEFAULT_DISABLE_AFTER,
        request_timeout: Duration = timedelta(seconds=DEFAULT_REQUEST_TIMEOUT),
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
    ) -> Job[WebhookEvent]:
        """Declare a webhook: a job that POSTs one `WebhookEvent` to the endpoint
        `endpoint(endpoint_id)` answers (a `WebhookEndpoint`, read on every attempt), signed
        (durajobs.webhooks), every attempt recorded in jobs.webhook_attempts; `disable_after`
        failures in a row (None: never) disable the endpoint. declare.webhook says why each
        rule holds. Enqueue one job per endpoint an event goes to."""
        if not callable(endpoint):
            raise DeclarationInvalid(
                f"webhook {name}: endpoint must be a function of an endpoint id",
                detail={"field": "endpoint"},
            )
        if disable_after is not None and (
            isinstance(disable_after, bool)
            or not isinstance(disable_after, int)
            or disable_after < 1
        ):
            raise DeclarationInvalid(
                f"webhook {name}: disable_after must be a whole number of at least 1, or None",
                detail={"field": "disable_after"},
            )
        webhook = Webhook(
            name=name,
            endpoint=endpoint,
            disable_after=disable_after,
            request_timeout=parse_duration(
                request_timeout, field="request_timeout"
            ).total_seconds(),
        )
        declare = self.job(
            name=name,
            input=WebhookEvent,
            idempotency_key=lambda event: delivery_key(name, event),
            tenant=tenant,
            queue=queue,
            retry=retry,
            timeout=timeout,
        )
        return declare(webhook.run)

    def backfills(self) -> list[Backfill]:
        """Every declared backfill, by name."""
        return [self._backfills[name] for name in sorted(self._backfills)]

    def is_backfill(self, job: object) -> bool:
        """Whether `job` (a Job or a name) is a backfill this registry declared."""
        name = job if isinstance(job, str) else getattr(job, "name", None)
        return (
            isinstance(name, str)
            and name in self._backfills
            and self._jobs.get(name) is not None
            and (isinstance(job, str) or self._jobs[name] is job)
        )

    def task(
        self,
        *,
        name: str,
        cron: str,
        tz: str,
        catch_up: CatchUp = "skip",
        max_catch_up: int = DEFAULT_MAX_CATCH_UP,
    ) -> Callable[[Entries], Task]:
        """Declare a cron task; decorate `def enqueue(occurrence) -> [(job, input), ...]`."""
        return declare_task(
            self._add_task,
            name=name,
            cron=cron,
            tz=tz,
            catch_up=catch_up,
            max_catch_up=max_catch_up,
        )

    def _add_task(self, task: Task) -> None:
        if task.name in self._tasks:
            raise JobDuplicate(
                f"a task named {task.name!r} is already declared", detail={"task": task.name}
            )
        self._tasks[task.name] = task

    def tasks(self) -> list[Task]:
        return [self._tasks[name] for name in sorted(self._tasks)]

    def get(self, name: str) -> Job[Any] | None:
        return self._jobs.get(name)

    def names(self) -> list[str]:
        """Every declared name, in code-point order (never locale collation)."""
        return sorted(self._jobs)

    def queues(self) -> list[str]:
        return sorted({job.queue for job in self._jobs.values()})

    def jobs(self) -> list[Job[Any]]:
        return [self._jobs[name] for name in self.names()]

    def dropped_when_exhausted(self) -> tuple[str, ...]:
        """The jobs whose exhausted runs end 'failed' rather than 'dead' (`dead_letter=False`),
        by name; kept until the next declaration, as a worker asks on every claim."""
        if self._dropped is None:
            self._dropped = tuple(job.name for job in self.jobs() if not job.retry.dead_letter)
        return self._dropped

    def declare(
        self, using: object = None, *, declared_by: str, replace: bool = False
    ) -> list[Declared]:
        """Write every declared job into the catalogue (`jobs.declarations`), on `using` or the
        registry's database; a name another deploy declared differently answers a conflict and
        keeps the stored declaration unless `replace`; declares the `redact` keys too."""
        if self.redact:
            self.run(calls.redact_keys(self.redact), using)
        return [
            self.run(job.declaration(declared_by=declared_by, replace=replace), using)
            for job in self.jobs()
        ]

    def run(self, call: calls.Call[T], using: object = None) -> T:
        """Run any call as an enqueue would: in `using`'s transaction, or on the pool."""
        return self.router.run(call, using)

    async def run_async(self, call: calls.Call[T], using: object = None) -> T:
        return await self.router.run_async(call, using)

    def close(self) -> None:
        """Close the connections direct enqueues keep open (a later enqueue opens them again)."""
        self.router.close()


def _is_async(handler: Handler) -> bool:
    # asked for every attempt: the answer never changes for one handler, so it is kept
    try:
        return _is_async_cached(handler)
    except TypeError:  # an unhashable callable object
        return _is_async_uncached(handler)


@functools.lru_cache(maxsize=1024)
def _is_async_cached(handler: Handler) -> bool:
    return _is_async_uncached(handler)


def _is_async_uncached(handler: Handler) -> bool:
    handler = inspect.unwrap(handler)
    if inspect.iscoroutinefunction(handler):
        return True
    if inspect.isfunction(handler) or inspect.ismethod(handler):
        return False
    return inspect.iscoroutinefunction(type(handler).__call__)  # a callable object
