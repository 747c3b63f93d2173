"""Job declarations: everything is checked when declared; enqueue validates, stamps and queues."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pydantic import BaseModel

import durajobs
from durajobs._values.durations import DeclarationInvalid
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import (
    DriverUnavailable,
    IdempotencyRequired,
    JobDuplicate,
    JobInputInvalid,
    JobTenantRequired,
)


class Invoice(BaseModel):
    invoice_id: int
    org_id: str
    note: str = ""


class Address(BaseModel):
    zip: str


class Customer(BaseModel):
    name: str
    address: Address


@dataclass(frozen=True)
class Actor:
    id: str
    org_id: str | None


def _invoice_key(invoice: Invoice) -> str:
    return f"invoice:{invoice.invoice_id}"


def _declare(registry: durajobs.Registry, name: str = "invoice.send", calls=None, **options):
    """Declare an Invoice job whose handler records any call (enqueue must never run it)."""
    options.setdefault("idempotency_key", _invoice_key)
    options.setdefault("tenant", lambda invoice: invoice.org_id)

    @registry.job(name=name, input=Invoice, **options)
    def handler(ctx):
        if calls is not None:
            calls.append(ctx)

    return handler


def _row(client: durajobs.Client, job_id: uuid.UUID) -> dict:
    cursor = client.connection.execute(
        """select name, queue, state, input, idempotency_key, tenant_id, run_id, max_attempts,
                  attempt, enqueued_by, run_at, created_at
             from jobs.jobs where id = %s""",
        [job_id],
    )
    columns = [column.name for column in cursor.description]
    found = cursor.fetchone()
    assert found is not None, f"no row for {job_id}"
    return dict(zip(columns, found, strict=True))


def _count(client: durajobs.Client) -> int:
    return client.connection.execute("select count(*) from jobs.jobs").fetchone()[0]


def _handler(ctx):
    return None


# -- declaration-time checks ----------------------------------------------------------------------


def test_a_declaration_without_an_idempotency_key_is_refused():
    registry = durajobs.Registry()
    with pytest.raises(IdempotencyRequired) as raised:
        registry.job(name="a", input=Invoice, tenant="none")
    assert raised.value.code == "X_IDEMPOTENCY_REQUIRED"
    assert raised.value.detail == {"job": "a"}
    with pytest.raises(IdempotencyRequired):
        registry.job(name="a", input=Invoice, tenant="none", idempotency_key="invoice")  # type: ignore[arg-type]
    assert registry.names() == []


def test_a_declaration_without_a_tenant_is_refused():
    registry = durajobs.Registry()
    with pytest.raises(JobTenantRequired) as raised:
        registry.job(name="a", input=Invoice, idempotency_key=_invoice_key)
    assert raised.value.code == "X_JOB_TENANT_REQUIRED"
    with pytest.raises(JobTenantRequired):
        # only the literal 'none' opts out; any other string is a mistake
        registry.job(name="a", input=Invoice, idempotency_key=_invoice_key, tenant="org")  # type: ignore[arg-type]
    assert registry.names() == []


def test_tenant_none_is_accepted():
    registry = durajobs.Registry()
    job = registry.job(name="a", input=Invoice, idempotency_key=_invoice_key, tenant="none")(
        _handler
    )
    assert job.tenant == "none"
    assert registry.names() == ["a"]
    assert registry.get("a") is job


def test_two_declarations_under_one_name_are_refused():
    registry = durajobs.Registry()
    first = _declare(registry, "same")
    with pytest.raises(JobDuplicate) as raised:
        _declare(registry, "same")
    assert raised.value.code == "X_JOB_DUPLICATE"
    assert raised.value.detail == {"job": "same"}
    assert registry.get("same") is first


def test_two_pending_declarations_under_one_name_are_refused_when_the_second_lands():
    registry = durajobs.Registry()
    declare_one = registry.job(
        name="same", input=Invoice, idempotency_key=_invoice_key, tenant="none"
    )
    declare_two = registry.job(
        name="same", input=Invoice, idempotency_key=_invoice_key, tenant="none"
    )
    first = declare_one(_handler)
    with pytest.raises(JobDuplicate):
        declare_two(_handler)
    assert registry.get("same") is first


def test_the_same_name_in_two_registries_is_fine():
    _declare(durajobs.Registry(), "shared")
    _declare(durajobs.Registry(), "shared")


@pytest.mark.parametrize("field", ["timeout", "step_timeout"])
@pytest.mark.parametrize(
    "value",
    [
        0,
        0.0,
        -1,
        -0.5,
        float("nan"),
        float("inf"),
        float("-inf"),
        "0ms",
        "0s",
        "-5s",
        "soon",
        "",
        "5",
        "5 weeks",
        timedelta(0),
        timedelta(seconds=-1),
        True,
        [5],
    ],
)
def test_invalid_durations_are_refused_at_declaration(field, value):
    """R27: 0 never means 'no ceiling'; NaN and infinity are refused too."""
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid) as raised:
        _declare(registry, **{field: value})
    assert raised.value.code == "X_JOB_DECLARATION_INVALID"
    assert raised.value.detail["field"] == field
    assert registry.names() == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("200ms", timedelta(milliseconds=200)),
        ("1.5s", timedelta(seconds=1.5)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("3d", timedelta(days=3)),
        (30, timedelta(seconds=30)),
        (0.25, timedelta(seconds=0.25)),
        (timedelta(seconds=9), timedelta(seconds=9)),
    ],
)
def test_valid_durations_reach_the_job(value, expected):
    job = _declare(durajobs.Registry(), timeout=value, step_timeout=value)
    assert job.timeout == expected
    assert job.step_timeout == expected


def test_no_timeout_means_none():
    job = _declare(durajobs.Registry())
    assert job.timeout is None
    assert job.step_timeout is None


@pytest.mark.parametrize("attempts", [0, 1.5, -1, float("nan"), True])
def test_invalid_retry_attempts_are_refused(attempts):
    with pytest.raises(DeclarationInvalid) as raised:
        RetryPolicy.of(attempts=attempts)
    assert raised.value.code == "X_JOB_DECLARATION_INVALID"
    assert raised.value.detail["field"] == "retry.attempts"


@pytest.mark.parametrize(
    "fields",
    [
        {"attempts": 0},
        {"attempts": -1},
        {"delay": timedelta(0)},
        {"max_delay": timedelta(seconds=-1)},
    ],
    ids=["attempts-0", "attempts-negative", "delay-0", "max-delay-negative"],
)
def test_a_retry_policy_built_directly_is_checked_too(fields):
    """RetryPolicy(...) is checked as RetryPolicy.of(...) is: never read as 'no limit'."""
    with pytest.raises(DeclarationInvalid):
        RetryPolicy(**fields)


@pytest.mark.parametrize(
    "model",
    [dict, Actor, Invoice(invoice_id=1, org_id="o"), "Invoice", None, BaseModel.__class__],
    ids=["dict", "dataclass", "model-instance", "string", "none", "metaclass"],
)
def test_input_must_be_a_pydantic_model_class(model):
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid) as raised:
        registry.job(name="a", input=model, idempotency_key=_invoice_key, tenant="none")
    assert raised.value.detail == {"field": "input"}
    assert registry.names() == []


@pytest.mark.parametrize("name", ["", "   ", None, 7])
def test_a_job_needs_an_explicit_name(name):
    with pytest.raises(DeclarationInvalid) as raised:
        durajobs.Registry().job(
            name=name, input=Invoice, idempotency_key=_invoice_key, tenant="none"
        )
    assert raised.value.detail == {"field": "name"}


@pytest.mark.parametrize("queue", ["", "  ", None])
def test_a_job_needs_a_queue_name(queue):
    with pytest.raises(DeclarationInvalid) as raised:
        _declare(durajobs.Registry(), queue=queue)
    assert raised.value.detail == {"field": "queue"}


def test_names_sort_by_code_point():
    """R25: never locale collation."""
    registry = durajobs.Registry()
    for name in ["b", "é", "B", "e", "a"]:
        _declare(registry, name)
    assert registry.names() == ["B", "a", "b", "e", "é"]
    assert [job.name for job in registry.jobs()] == ["B", "a", "b", "e", "é"]


def test_queues_lists_each_declared_queue_once():
    registry = durajobs.Registry()
    _declare(registry, "one", queue="mail")
    _declare(registry, "two", queue="billing")
    _declare(registry, "three", queue="mail")
    assert registry.queues() == ["billing", "mail"]


# -- describe -------------------------------------------------------------------------------------


def test_describe_reports_idempotent_and_the_retry_schedule_never_the_key():
    secret = "s3cret-key-prefix"
    registry = durajobs.Registry()
    job = _declare(
        registry,
        "invoice.describe",
        idempotency_key=lambda invoice: f"{secret}:{invoice.invoice_id}",
        retry=RetryPolicy.of(attempts=5, delay="1s", max_delay="3s"),
        timeout="2m",
        step_timeout="500ms",
        queue="billing",
    )
    described = job.describe()
    assert described["name"] == "invoice.describe"
    assert described["queue"] == "billing"
    assert described["idempotent"] is True
    assert described["tenant"] == "from input"
    assert described["retry"]["attempts"] == 5
    assert described["retry"]["backoff"] == "exponential"
    assert described["retry"]["schedule_seconds"] == [1, 2, 3, 3]
    assert described["retry"]["jitter"] is True
    assert described["retry"]["dead_letter"] is True
    assert described["timeout_seconds"] == 120
    assert described["step_timeout_seconds"] == 0.5
    assert described["async"] is False
    assert "invoice_id" in described["input"]["properties"]

    text = json.dumps(described)  # plain data only: no function, no key
    assert secret not in text
    assert "lambda" not in text
    assert "idempotency_key" not in described
    assert job.idempotency_key(Invoice(invoice_id=9, org_id="o")) not in text


def test_describe_of_an_untenanted_async_job():
    registry = durajobs.Registry()

    @registry.job(name="tick", input=Invoice, idempotency_key=_invoice_key, tenant="none")
    async def tick(ctx):
        return None

    described = tick.describe()
    assert described["tenant"] == "none"
    assert described["async"] is True
    assert described["timeout_seconds"] is None
    assert described["retry"]["attempts"] == 20
    assert len(described["retry"]["schedule_seconds"]) == 19


def test_every_job_describes_itself_as_idempotent():
    """R24."""
    registry = durajobs.Registry()
    for name in ["a", "b", "c"]:
        _declare(registry, name)
    assert all(job.describe()["idempotent"] is True for job in registry.jobs())


# -- parse ----------------------------------------------------------------------------------------


def test_parse_names_the_invalid_field():
    job = _declare(durajobs.Registry())
    with pytest.raises(JobInputInvalid) as raised:
        job.parse({"invoice_id": "forty-two", "org_id": "o"})
    assert raised.value.code == "X_JOB_INPUT_INVALID"
    assert raised.value.detail["field"] == "invoice_id"
    assert raised.value.detail["job"] == "invoice.send"
    assert "invoice_id" in str(raised.value)
    json.dumps(raised.value.detail)  # the errors are plain data

    with pytest.raises(JobInputInvalid) as missing:
        job.parse({"invoice_id": 1})
    assert missing.value.detail["field"] == "org_id"


def test_parse_names_a_nested_field_with_its_path():
    registry = durajobs.Registry()

    @registry.job(name="customer", input=Customer, idempotency_key=lambda c: c.name, tenant="none")
    def customer(ctx):
        return None

    with pytest.raises(JobInputInvalid) as raised:
        customer.parse({"name": "ada", "address": {"zip": 12345}})
    assert raised.value.detail["field"] == "address.zip"


def test_parse_keeps_a_model_instance_and_builds_one_from_a_mapping():
    job = _declare(durajobs.Registry())
    given = Invoice(invoice_id=1, org_id="o")
    assert job.parse(given) is given
    assert job.parse({"invoice_id": "2", "org_id": "o"}) == Invoice(invoice_id=2, org_id="o")


def test_a_non_object_input_is_refused():
    job = _declare(durajobs.Registry())
    with pytest.raises(JobInputInvalid) as raised:
        job.parse([1, 2])  # type: ignore[arg-type]
    assert raised.value.detail["field"] == "input"


# -- enqueue --------------------------------------------------------------------------------------


def test_enqueue_validates_input_and_stores_nothing(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    with pytest.raises(JobInputInvalid) as raised:
        job.enqueue({"invoice_id": "not-a-number", "org_id": "acme"})
    assert raised.value.detail["field"] == "invoice_id"
    with pytest.raises(JobInputInvalid) as missing:
        job.enqueue({"invoice_id": 1})
    assert missing.value.detail["field"] == "org_id"
    assert _count(client) == 0


def test_enqueue_answers_ids_and_stamps_the_declaration(database_url, client):
    calls: list = []
    job = _declare(
        durajobs.Registry(database_url=database_url),
        calls=calls,
        queue="billing",
        retry=RetryPolicy.of(attempts=7),
    )
    result = job.enqueue({"invoice_id": 42, "org_id": "acme"})
    assert isinstance(result, durajobs.EnqueueResult)
    assert isinstance(result.id, uuid.UUID)
    assert isinstance(result.run_id, uuid.UUID)
    assert result.deduped is False

    row = _row(client, result.id)
    assert row["name"] == "invoice.send"
    assert row["queue"] == "billing"
    assert row["state"] == "ready"
    assert row["input"] == {"invoice_id": 42, "org_id": "acme", "note": ""}
    assert row["idempotency_key"] == "invoice:42"
    assert row["tenant_id"] == "acme"
    assert row["run_id"] == result.run_id
    assert row["max_attempts"] == 7
    assert row["attempt"] == 0
    assert row["enqueued_by"] is None
    assert calls == []  # enqueue never runs the handler


def test_enqueue_accepts_a_model_instance(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    result = job.enqueue(Invoice(invoice_id=5, org_id="acme", note="hi"))
    assert _row(client, result.id)["input"] == {"invoice_id": 5, "org_id": "acme", "note": "hi"}


def test_the_default_retry_policy_gives_twenty_attempts(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert _row(client, result.id)["max_attempts"] == 20


def test_enqueue_dedupes_on_the_declared_key(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    first = job.enqueue({"invoice_id": 42, "org_id": "acme", "note": "first"})
    again = job.enqueue({"invoice_id": 42, "org_id": "acme", "note": "second"})
    assert again.deduped is True
    assert (again.id, again.run_id) == (first.id, first.run_id)
    other = job.enqueue({"invoice_id": 43, "org_id": "acme"})
    assert other.deduped is False
    # another tenant is another namespace
    elsewhere = job.enqueue({"invoice_id": 42, "org_id": "globex"})
    assert elsewhere.deduped is False
    assert _count(client) == 3
    assert _row(client, first.id)["input"]["note"] == "first"

    with pytest.raises(JobDuplicate) as raised:
        job.enqueue({"invoice_id": 42, "org_id": "acme"}, on_conflict="error")
    assert raised.value.detail["existing_id"] == str(first.id)


@pytest.mark.parametrize("key", ["", "   ", None, 42])
def test_a_key_function_answering_no_string_is_refused_at_enqueue(database_url, client, key):
    job = _declare(durajobs.Registry(database_url=database_url), idempotency_key=lambda _i: key)
    with pytest.raises(IdempotencyRequired) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert raised.value.detail == {"job": "invoice.send"}
    assert _count(client) == 0


def test_an_untenanted_job_stores_no_tenant(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url), tenant="none")
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert _row(client, result.id)["tenant_id"] is None


def test_a_per_call_queue_overrides_the_declared_one(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url), queue="billing")
    routed = job.enqueue({"invoice_id": 1, "org_id": "acme"}, queue="urgent")
    kept = job.enqueue({"invoice_id": 2, "org_id": "acme"})
    assert _row(client, routed.id)["queue"] == "urgent"
    assert _row(client, kept.id)["queue"] == "billing"
    assert [claimed.id for claimed in client.claim(["urgent"], "w")] == [routed.id]


def test_delay_and_run_at_make_the_row_delayed(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    delayed = job.enqueue({"invoice_id": 1, "org_id": "acme"}, delay="1h")
    row = _row(client, delayed.id)
    assert row["state"] == "delayed"
    waited = (row["run_at"] - row["created_at"]).total_seconds()
    assert 3600 - 5 <= waited <= 3600 + 5

    at = datetime.now(UTC) + timedelta(days=2)
    scheduled = job.enqueue({"invoice_id": 2, "org_id": "acme"}, run_at=at)
    row = _row(client, scheduled.id)
    assert row["state"] == "delayed"
    assert row["run_at"] == at

    past = job.enqueue({"invoice_id": 3, "org_id": "acme"}, run_at=at - timedelta(days=3))
    assert _row(client, past.id)["state"] == "ready"


def test_delay_and_run_at_together_are_refused(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    with pytest.raises(DeclarationInvalid):
        job.enqueue({"invoice_id": 1, "org_id": "acme"}, delay="1s", run_at=datetime.now(UTC))
    with pytest.raises(DeclarationInvalid) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"}, delay="0s")
    assert raised.value.detail["field"] == "delay"
    assert _count(client) == 0


def test_the_run_id_is_kept(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    run_id = uuid.uuid4()
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"}, run_id=run_id)
    assert result.run_id == run_id
    assert _row(client, result.id)["run_id"] == run_id


def test_enqueue_never_runs_the_handler(database_url, client):
    calls: list = []
    registry = durajobs.Registry(database_url=database_url)
    sync_job = _declare(registry, "sync", calls=calls)

    @registry.job(name="async", input=Invoice, idempotency_key=_invoice_key, tenant="none")
    async def async_job(ctx):
        calls.append(ctx)

    sync_job.enqueue({"invoice_id": 1, "org_id": "acme"})
    sync_job.as_(Actor(id="u1", org_id="acme"), {"invoice_id": 2, "org_id": "acme"})
    asyncio.run(async_job.enqueue_async({"invoice_id": 3, "org_id": "acme"}))
    assert calls == []
    assert _count(client) == 3


def test_enqueue_joins_the_callers_transaction(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    with psycopg.connect(database_url) as connection:
        rolled_back = job.enqueue({"invoice_id": 1, "org_id": "acme"}, using=connection)
        inside = connection.execute(
            "select count(*) from jobs.jobs where id = %s", [rolled_back.id]
        ).fetchone()[0]
        assert inside == 1  # visible inside the transaction
        assert _count(client) == 0  # and nowhere else yet
        connection.rollback()
        committed = job.enqueue({"invoice_id": 2, "org_id": "acme"}, using=connection)
        connection.commit()
    assert _count(client) == 1
    assert _row(client, committed.id)["idempotency_key"] == "invoice:2"


def test_enqueue_runs_on_a_client(database_url, client):
    job = _declare(durajobs.Registry())  # no database_url: the client is the database
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"}, using=client)
    assert _row(client, result.id)["tenant_id"] == "acme"


def test_a_sync_enqueue_refuses_an_async_connection(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))

    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            with pytest.raises(DeclarationInvalid):
                job.enqueue({"invoice_id": 1, "org_id": "acme"}, using=connection)

    asyncio.run(scenario())
    assert _count(client) == 0


def test_enqueue_async_joins_an_async_transaction(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))

    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            await job.enqueue_async({"invoice_id": 1, "org_id": "acme"}, using=connection)
            await connection.rollback()
            kept = await job.enqueue_async(
                {"invoice_id": 2, "org_id": "acme"}, using=connection, queue="urgent"
            )
            again = await job.enqueue_async({"invoice_id": 2, "org_id": "acme"}, using=connection)
            await connection.commit()
            return kept, again

    kept, again = asyncio.run(scenario())
    assert _count(client) == 1
    assert again.deduped is True
    assert again.id == kept.id
    row = _row(client, kept.id)
    assert (row["queue"], row["tenant_id"], row["idempotency_key"]) == (
        "urgent",
        "acme",
        "invoice:2",
    )


def test_enqueue_async_uses_the_registry_database(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    result = asyncio.run(job.enqueue_async({"invoice_id": 7, "org_id": "acme"}, delay="10m"))
    row = _row(client, result.id)
    assert row["state"] == "delayed"
    assert row["tenant_id"] == "acme"
    with pytest.raises(JobInputInvalid):
        asyncio.run(job.enqueue_async({"invoice_id": "x", "org_id": "acme"}))
    assert _count(client) == 1


def test_as_stamps_the_actor_as_tenant_and_enqueuer(database_url, client):
    calls: list = []
    job = _declare(durajobs.Registry(database_url=database_url), calls=calls)
    result = job.as_(Actor(id="user-7", org_id="org-9"), {"invoice_id": 1, "org_id": "acme"})
    row = _row(client, result.id)
    assert row["tenant_id"] == "org-9"  # the actor's org, not the tenant function's answer
    assert row["enqueued_by"] == "user-7"
    assert row["state"] == "ready"
    assert calls == []  # queued, never run inline

    later = job.as_(
        Actor(id="user-8", org_id=None), {"invoice_id": 2, "org_id": "acme"}, delay="1h"
    )
    row = _row(client, later.id)
    assert (row["tenant_id"], row["enqueued_by"], row["state"]) == (None, "user-8", "delayed")


def test_as_validates_input_like_enqueue(database_url, client):
    job = _declare(durajobs.Registry(database_url=database_url))
    with pytest.raises(JobInputInvalid) as raised:
        job.as_(Actor(id="u", org_id="o"), {"invoice_id": None, "org_id": "acme"})
    assert raised.value.detail["field"] == "invoice_id"
    assert _count(client) == 0


def test_enqueue_without_a_database_is_driver_unavailable():
    job = _declare(durajobs.Registry())
    with pytest.raises(DriverUnavailable) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert raised.value.code == "X_DRIVER_UNAVAILABLE"
    with pytest.raises(DriverUnavailable):
        job.as_(Actor(id="u", org_id="o"), {"invoice_id": 1, "org_id": "acme"})
    with pytest.raises(DriverUnavailable):
        asyncio.run(job.enqueue_async({"invoice_id": 1, "org_id": "acme"}))
    # an invalid input is still reported as such first
    with pytest.raises(JobInputInvalid):
        job.enqueue({"invoice_id": "x", "org_id": "acme"})
