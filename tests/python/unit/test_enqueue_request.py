"""An enqueue as one value: the request a job builds is what each way out sends."""

from __future__ import annotations

import pytest

import durajobs
from durajobs.declare.enqueue import EnqueueRequest
from support.factory import declare
from support.models import Numbered


def _job(tenant: object = "none") -> durajobs.Job[Numbered]:
    registry = durajobs.Registry()

    @declare(registry, "req", input=Numbered, idempotency_key=lambda i: f"r:{i.n}", tenant=tenant)
    def handler(ctx): ...

    return handler


def test_the_request_carries_the_declaration_and_the_call_options():
    request = _job().request({"n": 3}, queue="urgent", priority=5)
    assert request == EnqueueRequest(
        name="req",
        input={"n": 3},
        idempotency_key="r:3",
        queue="urgent",
        max_attempts=request.max_attempts,
        priority=5,
        traceparent=request.traceparent,
    )
    call = request.call()
    assert call.function == "jobs.enqueue"
    assert call.params["queue"] == "urgent"
    assert call.params["on_conflict"] == "dedupe"


def test_a_staged_request_refuses_what_only_a_publish_can_answer():
    request = _job().request({"n": 1}, on_conflict="error")
    with pytest.raises(durajobs.ArgumentInvalid, match="on_conflict"):
        request.staged_call()
    assert _job().request({"n": 1}).staged_call().function == "jobs.outbox_stage"


def test_a_fire_entry_names_the_tenant_only_when_there_is_one():
    tenantless = _job().request({"n": 1}).fire_entry()
    assert "tenant_id" not in tenantless
    tenanted = _job(tenant=lambda i: f"org-{i.n}").request({"n": 2}).fire_entry()
    assert tenanted["tenant_id"] == "org-2"
    assert set(tenanted) == {
        "name",
        "input",
        "idempotency_key",
        "queue",
        "max_attempts",
        "tenant_id",
    }
