"""/healthz and /readyz on a worker's metrics port, as a Kubernetes probe or a systemd watchdog
asks them: ready while it does its work, 503 with the reason while it drains or while its
database is silent, ready again once it answers."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any

import psycopg

import durajobs
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import TimedItem
from support.outbox import eventually


def _probe(worker: Worker, path: str) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{worker.metrics.port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


async def _probe_async(worker: Worker, path: str) -> tuple[int, dict[str, Any]]:
    return await asyncio.to_thread(_probe, worker, path)


def test_a_working_worker_is_live_and_ready_and_a_draining_one_is_not_ready(database_url):
    registry = durajobs.Registry(database_url=database_url)
    # a plain def body in its thread: the drain cannot cut it short, so the worker (and its
    # port) stays up while the test asks
    release = threading.Event()
    started = threading.Event()

    @declare(registry, "held", input=TimedItem)
    def held(ctx) -> None:
        started.set()
        release.wait(30)

    worker = Worker(registry, database_url, metrics_port=0, metrics_host="127.0.0.1")
    answers: dict[str, tuple[int, dict[str, Any]]] = {}

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        try:

            async def ready() -> bool:
                if worker.metrics.port is None:
                    return False
                return (await _probe_async(worker, "/readyz"))[0] == 200

            await eventually(ready, what="a ready worker")
            answers["healthz"] = await _probe_async(worker, "/healthz")
            answers["ready"] = await _probe_async(worker, "/readyz")
            held.enqueue({"key": "k"})
            await eventually(started.is_set, what="the held body running")
            worker.drain()  # waits for the held body
            answers["draining"] = await _probe_async(worker, "/readyz")
            answers["draining healthz"] = await _probe_async(worker, "/healthz")
        finally:
            release.set()
            await runner

    asyncio.run(scenario())
    assert answers["healthz"] == (200, {"status": "ok"})
    assert answers["ready"] == (
        200,
        {
            "ready": True,
            "checks": {"accepting": "ok", "database": "ok", "claim_loop": "ok", "wake": "ok"},
        },
    )
    status, document = answers["draining"]
    assert status == 503
    assert document["checks"]["accepting"] == "draining"
    assert answers["draining healthz"][0] == 200, "a draining process is still alive"


def test_a_worker_whose_database_is_silent_is_not_ready_until_it_answers(database_url):
    registry = durajobs.Registry(database_url=database_url)
    worker = Worker(
        registry,
        database_url,
        queues=["quiet"],
        listen=False,
        metrics_port=0,
        metrics_host="127.0.0.1",
        poll_floor=timedelta(milliseconds=50),
        idle_ceiling=timedelta(milliseconds=100),
        ready_within=timedelta(milliseconds=600),
    )
    real_run = worker.db.run
    silent = {"on": False}

    async def maybe_silent(call: Any) -> Any:
        if silent["on"]:
            raise psycopg.OperationalError("the database is away")
        return await real_run(call)

    worker.db.run = maybe_silent  # type: ignore[method-assign]
    seen: dict[str, tuple[int, dict[str, Any]]] = {}

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        try:

            async def status_is(wanted: int, failing: tuple[str, ...] = ()) -> bool:
                if worker.metrics.port is None:
                    return False
                answer = await _probe_async(worker, "/readyz")
                seen[str(wanted)] = answer
                checks = answer[1]["checks"]
                return answer[0] == wanted and all(checks[name] != "ok" for name in failing)

            await eventually(lambda: status_is(200), what="a ready worker")
            silent["on"] = True
            await eventually(
                lambda: status_is(503, ("database", "claim_loop")), what="a silent database noticed"
            )
            silent["on"] = False
            await eventually(lambda: status_is(200), what="ready again")
        finally:
            worker.stop()
            await runner

    asyncio.run(scenario())
    checks = seen["503"][1]["checks"]
    assert checks["database"].startswith("no answer from the database for")
    assert checks["claim_loop"].startswith("no claim pass for")
    assert "wake" not in checks, "a worker without LISTEN has no wake to judge"
