"""OpenTelemetry: an enqueue stamps the caller's trace context, the worker's span for the run
is its child, and spans the body opens are the run's children. Without OpenTelemetry nothing
breaks (the command line's traceparent and an interpreter without OpenTelemetry are in
processes/test_cli and processes/test_fresh_interpreters)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import durajobs
from durajobs.observe import tracing
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.running import run_until


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)  # once per process: the module shares it
    tracing._sdk_seen = (float("-inf"), False)  # a worker of an earlier test cached "no SDK"
    return spans


def _row(database_url, key):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(
            "select state, traceparent from jobs.jobs where idempotency_key = %s", [key]
        ).fetchone()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_the_run_is_a_child_of_the_span_that_enqueued_it(database_url, exporter, kind):
    exporter.clear()
    registry = durajobs.Registry(database_url=database_url)
    tracer = trace.get_tracer("test")

    if kind == "async":

        @declare(registry, "traced")
        async def traced_async(ctx) -> None:
            with tracer.start_as_current_span("inside"):
                pass

    else:

        @declare(registry, "traced")
        def traced_sync(ctx) -> None:
            with tracer.start_as_current_span("inside"):
                pass

    with tracer.start_as_current_span("request") as request:
        registry.get("traced").enqueue({"key": "t"})
    request_context = request.get_span_context()

    _state, traceparent = _row(database_url, "t")
    version, trace_id, parent_id, _flags = traceparent.split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        f"{request_context.trace_id:032x}",
        f"{request_context.span_id:016x}",
    )

    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, lambda: _row(database_url, "t")[0] == "done"))

    spans = {span.name: span for span in exporter.get_finished_spans()}
    run, inside = spans["job traced"], spans["inside"]
    assert run.context.trace_id == request_context.trace_id
    assert run.parent is not None
    assert run.parent.span_id == request_context.span_id
    assert run.kind is trace.SpanKind.CONSUMER
    assert run.attributes["durajobs.job"] == "traced"
    assert inside.parent is not None
    assert inside.parent.span_id == run.context.span_id


def test_an_enqueue_outside_any_span_stamps_nothing(database_url, exporter):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "plain")
    async def plain(ctx) -> None:
        return None

    registry.get("plain").enqueue({"key": "p"})
    assert _row(database_url, "p") == ("ready", None)


def _traceparent_of(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def test_client_enqueue_stamps_the_current_span_unless_given_one(database_url, exporter):
    tracer = trace.get_tracer("test")
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with durajobs.Client.connect(database_url) as client:
        with tracer.start_as_current_span("request") as request:
            client.enqueue("by-name", {}, "c1")
            client.enqueue("by-name", {}, "c2", traceparent=given)
            client.enqueue("by-name", {}, "c3", traceparent=None)
        client.enqueue("by-name", {}, "c4")
    assert _row(database_url, "c1") == ("ready", _traceparent_of(request))
    assert _row(database_url, "c2") == ("ready", given)
    assert _row(database_url, "c3") == ("ready", None)
    assert _row(database_url, "c4") == ("ready", None)


def test_client_enqueue_many_stamps_each_request_without_its_own(database_url, exporter):
    tracer = trace.get_tracer("test")
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    requests = [
        {"name": "bulk", "input": {}, "idempotency_key": "m1"},
        {"name": "bulk", "input": {}, "idempotency_key": "m2", "traceparent": given},
    ]
    with durajobs.Client.connect(database_url) as client:
        with tracer.start_as_current_span("request") as request:
            client.enqueue_many(requests)
        client.enqueue_many([{"name": "bulk", "input": {}, "idempotency_key": "m3"}])
    assert "traceparent" not in requests[0], "the caller's request is not changed"
    assert _row(database_url, "m1") == ("ready", _traceparent_of(request))
    assert _row(database_url, "m2") == ("ready", given)
    assert _row(database_url, "m3") == ("ready", None)
