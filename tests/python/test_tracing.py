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
from durajobs.observe import tracing
from durajobs.runtime.worker import Worker
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


def _cli_enqueue(database_url, key, *flags, environment=None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "enqueue",
            "cli",
            "--input",
            "{}",
            "--key",
            key,
            *flags,
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url, **(environment or {})},
        timeout=120,
    )


def test_the_command_line_stamps_its_flag_or_the_inherited_traceparent(database_url):
    flag = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    inherited = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    done = _cli_enqueue(database_url, "t1", "--traceparent", flag)
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(database_url, "t2", environment={"TRACEPARENT": inherited})
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(
        database_url, "t3", "--traceparent", flag, environment={"TRACEPARENT": inherited}
    )
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(database_url, "t4")
    assert done.returncode == 0, done.stderr
    assert _row(database_url, "t1") == ("ready", flag)
    assert _row(database_url, "t2") == ("ready", inherited)
    assert _row(database_url, "t3") == ("ready", flag), "the flag wins over the environment"
    assert _row(database_url, "t4") == ("ready", None)


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-traceparent",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
    ],
)
def test_the_command_line_refuses_a_malformed_traceparent_and_stores_nothing(database_url, bad):
    for flags, environment, source in (
        (("--traceparent", bad), None, "--traceparent"),
        ((), {"TRACEPARENT": bad}, "TRACEPARENT"),
    ):
        done = _cli_enqueue(database_url, "bad", *flags, environment=environment)
        assert done.returncode == 1
        assert "X_ARGUMENT_INVALID" in done.stderr
        assert f"{source} is not a W3C traceparent" in done.stderr
        assert "fix: pass version-traceid-parentid-flags" in done.stderr
    with psycopg.connect(database_url, autocommit=True) as connection:
        assert connection.execute("select count(*) from jobs.jobs").fetchone() == (0,)


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
        "from durajobs.runtime.worker import Worker\n"
        "from durajobs.observe.tracing import current_traceparent\n"
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
