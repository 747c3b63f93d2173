"""Argument limits seen from Python: every refusal arrives as its class with the argument and
the limit in its detail, nothing is stored, and a failure report is cut rather than refused.
The SQL side of each limit, at its boundary, is tests/pgtap/011_bounds.sql."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durajobs
from durajobs import errors
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import DeclarationInvalid
from support.models import Invoice, invoice_key


def _count(client, table="jobs.jobs"):
    return client.connection.execute(f"select count(*) from {table}").fetchone()[0]


def test_an_over_long_name_is_argument_invalid_not_a_raw_index_error(client):
    client.enqueue("n" * 200, {}, "k" * 200, queue="q" * 200, tenant_id="t" * 200)
    with pytest.raises(errors.ArgumentInvalid) as refused:
        client.enqueue("n" * 201, {}, "k")
    assert refused.value.detail["argument"] == "name"
    assert "at most 200 characters" in str(refused.value)
    with pytest.raises(errors.ArgumentInvalid) as refused:
        client.enqueue("n", {}, "k" * 3000)
    assert refused.value.detail["argument"] == "idempotency_key"
    assert _count(client) == 1


def test_whitespace_only_names_and_keys_are_blank(client):
    with pytest.raises(errors.ArgumentInvalid):
        client.enqueue("\t\n", {}, "k")
    with pytest.raises(errors.IdempotencyRequired):
        client.enqueue("n", {}, "\n\t ")
    with pytest.raises(errors.ArgumentInvalid):
        client.enqueue("n", {}, "k", queue="\t")
    assert _count(client) == 0


def test_an_input_over_the_limit_names_the_limit_and_how_to_raise_it(client):
    big = {"blob": "x" * (1024 * 1024)}
    with pytest.raises(errors.ArgumentInvalid) as refused:
        client.enqueue("n", big, "k")
    assert refused.value.detail["limit"] == "input"
    assert refused.value.detail["max_bytes"] == 1048576
    assert refused.value.detail["bytes"] > 1048576
    assert "jobs.set_size_limit('input'" in (refused.value.hint or "")
    assert _count(client) == 0

    # the owner raises it, and the same input lands
    client.connection.execute("select jobs.set_size_limit('input', 2 * 1048576)")
    client.enqueue("n", big, "k")
    assert _count(client) == 1


def test_numbers_instants_and_traceparent_are_bounded(client):
    for options, argument in [
        ({"max_attempts": 1001}, "max_attempts"),
        ({"priority": -1001}, "priority"),
        ({"run_at": "294276-01-01T00:00:00+00:00"}, "run_at"),
        ({"traceparent": "00-abc-def-01"}, "traceparent"),
    ]:
        with pytest.raises(errors.ArgumentInvalid) as refused:
            client.enqueue("n", {}, "k", **options)
        assert refused.value.detail["argument"] == argument
    assert _count(client) == 0


def test_a_nack_with_a_huge_error_lands_cut(client):
    job = client.enqueue("n", {}, "k", max_attempts=1)
    claimed = client.claim(["default"], "w")[0]
    assert client.nack(
        claimed.fence,
        next_state=durajobs.NackTarget.DEAD,
        error="e" * 500_000,
        error_stack="s" * 500_000,
    )
    error, stack = client.connection.execute(
        "select last_error, last_error_stack from jobs.jobs where id = %s", [job.id]
    ).fetchone()
    assert len(error.encode()) <= 65536
    assert error.endswith("[cut: 500000 bytes in all]")
    assert len(stack.encode()) <= 65536


def test_the_pause_of_an_over_long_queue_is_refused(client):
    with pytest.raises(errors.ArgumentInvalid):
        client.pause_queue("q" * 9000)
    assert _count(client, "jobs.queue_pauses") == 0


def test_a_claim_lease_over_a_day_is_refused(client):
    with pytest.raises(errors.ArgumentInvalid) as refused:
        client.claim(["default"], "w", visibility=timedelta(days=2))
    assert refused.value.detail["argument"] == "visibility"


def test_declarations_hold_the_same_bounds_before_any_database():
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid):
        registry.job(name="n" * 201, input=Invoice, idempotency_key=invoice_key, tenant="none")
    with pytest.raises(DeclarationInvalid):
        registry.job(
            name="a", input=Invoice, idempotency_key=invoice_key, tenant="none", queue="q" * 201
        )
    with pytest.raises(DeclarationInvalid):
        registry.job(
            name="a", input=Invoice, idempotency_key=invoice_key, tenant="none", priority=1001
        )
    with pytest.raises(DeclarationInvalid):
        RetryPolicy(attempts=1001)
    registry.job(
        name="n" * 200, input=Invoice, idempotency_key=invoice_key, tenant="none", priority=-1000
    )(lambda ctx: None)
    assert registry.names() == ["n" * 200]
