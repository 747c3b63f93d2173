"""Job declarations without a database: everything is checked when declared, described
without the key, parsed naming the invalid field; an enqueue with no database to go to."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

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
from support.factory import declare_invoice
from support.models import Actor, Invoice, invoice_key


class Address(BaseModel):
    zip: str


class Customer(BaseModel):
    name: str
    address: Address


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
        registry.job(name="a", input=Invoice, idempotency_key=invoice_key)
    assert raised.value.code == "X_JOB_TENANT_REQUIRED"
    with pytest.raises(JobTenantRequired):
        # only the literal 'none' opts out; any other string is a mistake
        registry.job(name="a", input=Invoice, idempotency_key=invoice_key, tenant="org")  # type: ignore[arg-type]
    assert registry.names() == []


def test_tenant_none_is_accepted():
    registry = durajobs.Registry()
    job = registry.job(name="a", input=Invoice, idempotency_key=invoice_key, tenant="none")(
        _handler
    )
    assert job.tenant == "none"
    assert registry.names() == ["a"]
    assert registry.get("a") is job


def test_two_declarations_under_one_name_are_refused():
    registry = durajobs.Registry()
    first = declare_invoice(registry, "same")
    with pytest.raises(JobDuplicate) as raised:
        declare_invoice(registry, "same")
    assert raised.value.code == "X_JOB_DUPLICATE"
    assert raised.value.detail == {"job": "same"}
    assert registry.get("same") is first


def test_two_pending_declarations_under_one_name_are_refused_when_the_second_lands():
    registry = durajobs.Registry()
    declare_one = registry.job(
        name="same", input=Invoice, idempotency_key=invoice_key, tenant="none"
    )
    declare_two = registry.job(
        name="same", input=Invoice, idempotency_key=invoice_key, tenant="none"
    )
    first = declare_one(_handler)
    with pytest.raises(JobDuplicate):
        declare_two(_handler)
    assert registry.get("same") is first


def test_the_same_name_in_two_registries_is_fine():
    declare_invoice(durajobs.Registry(), "shared")
    declare_invoice(durajobs.Registry(), "shared")


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
        declare_invoice(registry, **{field: value})
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
    job = declare_invoice(durajobs.Registry(), timeout=value, step_timeout=value)
    assert job.timeout == expected
    assert job.step_timeout == expected


def test_no_timeout_means_none():
    job = declare_invoice(durajobs.Registry())
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
        registry.job(name="a", input=model, idempotency_key=invoice_key, tenant="none")
    assert raised.value.detail == {"field": "input"}
    assert registry.names() == []


@pytest.mark.parametrize("name", ["", "   ", None, 7])
def test_a_job_needs_an_explicit_name(name):
    with pytest.raises(DeclarationInvalid) as raised:
        durajobs.Registry().job(
            name=name, input=Invoice, idempotency_key=invoice_key, tenant="none"
        )
    assert raised.value.detail == {"field": "name"}


@pytest.mark.parametrize("queue", ["", "  ", None])
def test_a_job_needs_a_queue_name(queue):
    with pytest.raises(DeclarationInvalid) as raised:
        declare_invoice(durajobs.Registry(), queue=queue)
    assert raised.value.detail == {"field": "queue"}


def test_names_sort_by_code_point():
    """R25: never locale collation."""
    registry = durajobs.Registry()
    for name in ["b", "é", "B", "e", "a"]:
        declare_invoice(registry, name)
    assert registry.names() == ["B", "a", "b", "e", "é"]
    assert [job.name for job in registry.jobs()] == ["B", "a", "b", "e", "é"]


def test_queues_lists_each_declared_queue_once():
    registry = durajobs.Registry()
    declare_invoice(registry, "one", queue="mail")
    declare_invoice(registry, "two", queue="billing")
    declare_invoice(registry, "three", queue="mail")
    assert registry.queues() == ["billing", "mail"]


@pytest.mark.parametrize("bad", [0, -1, "0ms", float("inf"), float("nan"), "soon"])
def test_an_impossible_event_poll_is_refused_at_declaration(bad):
    """R27: 0 would be a busy resume loop, infinity would never wake."""
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid):
        declare_invoice(registry, "n", event_poll=bad)


# -- describe -------------------------------------------------------------------------------------


def test_describe_reports_idempotent_and_the_retry_schedule_never_the_key():
    secret = "s3cret-key-prefix"
    registry = durajobs.Registry()
    job = declare_invoice(
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

    @registry.job(name="tick", input=Invoice, idempotency_key=invoice_key, tenant="none")
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
        declare_invoice(registry, name)
    assert all(job.describe()["idempotent"] is True for job in registry.jobs())


# -- parse ----------------------------------------------------------------------------------------


def test_parse_names_the_invalid_field():
    job = declare_invoice(durajobs.Registry())
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
    job = declare_invoice(durajobs.Registry())
    given = Invoice(invoice_id=1, org_id="o")
    assert job.parse(given) is given
    assert job.parse({"invoice_id": "2", "org_id": "o"}) == Invoice(invoice_id=2, org_id="o")


def test_a_non_object_input_is_refused():
    job = declare_invoice(durajobs.Registry())
    with pytest.raises(JobInputInvalid) as raised:
        job.parse([1, 2])  # type: ignore[arg-type]
    assert raised.value.detail["field"] == "input"


# -- enqueue without a database -------------------------------------------------------------------


def test_enqueue_without_a_database_is_driver_unavailable():
    job = declare_invoice(durajobs.Registry())
    with pytest.raises(DriverUnavailable) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert raised.value.code == "X_DRIVER_UNAVAILABLE"
    with pytest.raises(DriverUnavailable):
        job.as_(Actor(id="u", org_id="acme"), {"invoice_id": 1, "org_id": "acme"})
    with pytest.raises(DriverUnavailable):
        asyncio.run(job.enqueue_async({"invoice_id": 1, "org_id": "acme"}))
    # an invalid input is still reported as such first
    with pytest.raises(JobInputInvalid):
        job.enqueue({"invoice_id": "x", "org_id": "acme"})


def test_the_jobs_dropped_when_exhausted_follow_every_declaration():
    # a worker asks on every claim and the answer is kept: a job declared after the first ask
    # must still be in the next answer, or its exhausted runs would go 'dead' instead of 'failed'
    registry = durajobs.Registry()

    @registry.job(name="kept", input=Invoice, idempotency_key=invoice_key, tenant="none")
    async def kept(ctx: durajobs.JobContext[Invoice]) -> None:
        return None

    assert registry.dropped_when_exhausted() == ()

    @registry.job(
        name="dropped",
        input=Invoice,
        idempotency_key=invoice_key,
        tenant="none",
        retry=RetryPolicy(dead_letter=False),
    )
    async def dropped(ctx: durajobs.JobContext[Invoice]) -> None:
        return None

    assert registry.dropped_when_exhausted() == ("dropped",)
    assert registry.dropped_when_exhausted() is registry.dropped_when_exhausted()
