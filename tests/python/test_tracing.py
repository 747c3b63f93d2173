"""OpenTelemetry: an enqueue stamps the caller's trace context, the worker's span for the run
is its child, and spans the body opens are the run's children. Without OpenTelemetry nothing
breaks."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

import durajobs
from durajobs import tracing
from durajobs.worker import Worker
from running import run_until


class Item(BaseModel):
    key: str


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

        @registry.job(name="traced", input=Item, idempotency_key=lambda i: i.key, tenant="none")
        async def traced_async(ctx) -> None:
            with tracer.start_as_current_span("inside"):
                pass

    else:

        @registry.job(name="traced", input=Item, idempotency_key=lambda i: i.key, tenant="none")
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

    @registry.job(name="plain", input=Item, idempotency_key=lambda i: i.key, tenant="none")
    async def plain(ctx) -> None:
        return None

    registry.get("plain").enqueue({"key": "p"})
    assert _row(database_url, "p") == ("ready", None)


def test_without_opentelemetry_enqueue_and_run_work(database_url, tmp_path):
    """The optional dependency is hidden from a fresh interpreter: nothing breaks."""
    script = tmp_path / "no_otel.py"
    script.write_text(
        "import sys, asyncio, time\n"
        "sys.modules['opentelemetry'] = None  # as if it were not installed\n"
        "import durajobs\n"
        "from pydantic import BaseModel\n"
        "class Empty(BaseModel):\n"
        "    pass\n"
        "from durajobs.worker import Worker\n"
        "from durajobs.tracing import current_traceparent\n"
        "assert current_traceparent() is None\n"
        "registry = durajobs.Registry(database_url=sys.argv[1])\n"
        "@registry.job(name='n', input=Empty, idempotency_key=lambda i: 'k', tenant='none')\n"
        "async def n(ctx):\n"
        "    return None\n"
        "registry.get('n').enqueue({})\n"
        "worker = Worker(registry, sys.argv[1], listen=False)\n"
        "async def main():\n"
        "    runner = asyncio.ensure_future(worker.run())\n"
        "    while worker.stats().completed < 1:\n"
        "        await asyncio.sleep(0.02)\n"
        "    worker.stop()\n"
        "    await runner\n"
        "asyncio.run(main())\n"
        "print('ran')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), database_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran"
    assert _row(database_url, "k") == ("done", None)
