"""Enqueue of a declared job against a real database: it validates, stamps, dedupes and
queues, inside the caller's transaction when given one (what is checked at declaration is
unit/test_declaration_checks)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import durajobs
from durajobs._values.durations import DeclarationInvalid
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import IdempotencyRequired, JobDuplicate, JobInputInvalid
from support.factory import declare_invoice
from support.models import Actor, Invoice, invoice_key


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


def test_enqueue_validates_input_and_stores_nothing(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    with pytest.raises(JobInputInvalid) as raised:
        job.enqueue({"invoice_id": "not-a-number", "org_id": "acme"})
    assert raised.value.detail["field"] == "invoice_id"
    with pytest.raises(JobInputInvalid) as missing:
        job.enqueue({"invoice_id": 1})
    assert missing.value.detail["field"] == "org_id"
    assert _count(client) == 0


def test_enqueue_answers_ids_and_stamps_the_declaration(database_url, client):
    calls: list = []
    job = declare_invoice(
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
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    result = job.enqueue(Invoice(invoice_id=5, org_id="acme", note="hi"))
    assert _row(client, result.id)["input"] == {"invoice_id": 5, "org_id": "acme", "note": "hi"}


def test_the_default_retry_policy_gives_twenty_attempts(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert _row(client, result.id)["max_attempts"] == 20


def test_enqueue_dedupes_on_the_declared_key(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
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
    job = declare_invoice(
        durajobs.Registry(database_url=database_url), idempotency_key=lambda _i: key
    )
    with pytest.raises(IdempotencyRequired) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert raised.value.detail == {"job": "invoice.send"}
    assert _count(client) == 0


def test_an_untenanted_job_stores_no_tenant(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url), tenant="none")
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"})
    assert _row(client, result.id)["tenant_id"] is None


def test_a_per_call_queue_overrides_the_declared_one(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url), queue="billing")
    routed = job.enqueue({"invoice_id": 1, "org_id": "acme"}, queue="urgent")
    kept = job.enqueue({"invoice_id": 2, "org_id": "acme"})
    assert _row(client, routed.id)["queue"] == "urgent"
    assert _row(client, kept.id)["queue"] == "billing"
    assert [claimed.id for claimed in client.claim(["urgent"], "w")] == [routed.id]


def test_delay_and_run_at_make_the_row_delayed(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
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
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    with pytest.raises(DeclarationInvalid):
        job.enqueue({"invoice_id": 1, "org_id": "acme"}, delay="1s", run_at=datetime.now(UTC))
    with pytest.raises(DeclarationInvalid) as raised:
        job.enqueue({"invoice_id": 1, "org_id": "acme"}, delay="0s")
    assert raised.value.detail["field"] == "delay"
    assert _count(client) == 0


def test_the_run_id_is_kept(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    run_id = uuid.uuid4()
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"}, run_id=run_id)
    assert result.run_id == run_id
    assert _row(client, result.id)["run_id"] == run_id


def test_enqueue_never_runs_the_handler(database_url, client):
    calls: list = []
    registry = durajobs.Registry(database_url=database_url)
    sync_job = declare_invoice(registry, "sync", calls=calls)

    @registry.job(name="async", input=Invoice, idempotency_key=invoice_key, tenant="none")
    async def async_job(ctx):
        calls.append(ctx)

    sync_job.enqueue({"invoice_id": 1, "org_id": "acme"})
    sync_job.as_(Actor(id="u1", org_id="acme"), {"invoice_id": 2, "org_id": "acme"})
    asyncio.run(async_job.enqueue_async({"invoice_id": 3, "org_id": "acme"}))
    assert calls == []
    assert _count(client) == 3


def test_enqueue_joins_the_callers_transaction(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
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
    job = declare_invoice(durajobs.Registry())  # no database_url: the client is the database
    result = job.enqueue({"invoice_id": 1, "org_id": "acme"}, using=client)
    assert _row(client, result.id)["tenant_id"] == "acme"


def test_a_sync_enqueue_refuses_an_async_connection(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))

    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            with pytest.raises(DeclarationInvalid):
                job.enqueue({"invoice_id": 1, "org_id": "acme"}, using=connection)

    asyncio.run(scenario())
    assert _count(client) == 0


def test_enqueue_async_joins_an_async_transaction(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))

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
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    result = asyncio.run(job.enqueue_async({"invoice_id": 7, "org_id": "acme"}, delay="10m"))
    row = _row(client, result.id)
    assert row["state"] == "delayed"
    assert row["tenant_id"] == "acme"
    with pytest.raises(JobInputInvalid):
        asyncio.run(job.enqueue_async({"invoice_id": "x", "org_id": "acme"}))
    assert _count(client) == 1


def test_as_stamps_the_actor_as_enqueuer_of_its_own_orgs_job(database_url, client):
    calls: list = []
    job = declare_invoice(durajobs.Registry(database_url=database_url), calls=calls)
    result = job.as_(Actor(id="user-7", org_id="acme"), {"invoice_id": 1, "org_id": "acme"})
    row = _row(client, result.id)
    assert row["tenant_id"] == "acme"
    assert row["enqueued_by"] == "user-7"
    assert row["state"] == "ready"
    assert calls == []  # queued, never run inline

    later = job.as_(
        Actor(id="user-8", org_id="acme"), {"invoice_id": 2, "org_id": "acme"}, delay="1h"
    )
    row = _row(client, later.id)
    assert (row["tenant_id"], row["enqueued_by"], row["state"]) == ("acme", "user-8", "delayed")


def test_an_actor_of_another_org_than_the_input_names_is_refused(database_url, client):
    """R33: an org's member must not enqueue work for another org through the queue."""
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    for org in ("org-9", None):
        with pytest.raises(durajobs.JobTenantMismatch) as refused:
            job.as_(Actor(id="user-7", org_id=org), {"invoice_id": 1, "org_id": "acme"})
        assert refused.value.detail == {"job": "invoice.send", "actor_org": org, "tenant": "acme"}
    assert client.list_jobs() == [], "nothing was stored"


def test_a_tenantless_job_acts_for_its_actors_org_and_needs_one(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url), tenant="none")
    stored = job.as_(Actor(id="user-7", org_id="org-9"), {"invoice_id": 1, "org_id": "acme"})
    assert _row(client, stored.id)["tenant_id"] == "org-9"
    with pytest.raises(durajobs.TenancyActorOrgRequired):
        job.as_(Actor(id="user-8", org_id=None), {"invoice_id": 2, "org_id": "acme"})


def test_as_validates_input_like_enqueue(database_url, client):
    job = declare_invoice(durajobs.Registry(database_url=database_url))
    with pytest.raises(JobInputInvalid) as raised:
        job.as_(Actor(id="u", org_id="o"), {"invoice_id": None, "org_id": "acme"})
    assert raised.value.detail["field"] == "invoice_id"
    assert _count(client) == 0
