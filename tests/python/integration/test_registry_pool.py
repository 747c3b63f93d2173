"""A registry's direct enqueues reuse pooled connections instead of connecting per call."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._db.pool import APPLICATION_NAME
from support.factory import declare
from support.models import Numbered


def _backend_pid() -> calls.Call[int]:
    return calls.Call("pg_backend_pid", "select pg_backend_pid()", {}, lambda rows: rows[0][0])


def test_direct_enqueues_share_a_pooled_connection(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "pooled", input=Numbered, idempotency_key=lambda i: f"p:{i.n}")
    def pooled(ctx): ...

    try:
        first = registry.run(_backend_pid())
        for n in range(5):
            pooled.enqueue({"n": n})
        assert registry.run(_backend_pid()) == first, "one connection served every call"
        with psycopg.connect(database_url, autocommit=True) as observer:
            (held,) = observer.execute(
                "select count(*) from pg_stat_activity where application_name = %s",
                [APPLICATION_NAME],
            ).fetchone()
            (stored,) = observer.execute("select count(*) from jobs.jobs").fetchone()
        assert held == 1, "the connection stays open between enqueues"
        assert stored == 5
    finally:
        registry.close()
    with psycopg.connect(database_url, autocommit=True) as observer:
        (left,) = observer.execute(
            "select count(*) from pg_stat_activity where application_name = %s",
            [APPLICATION_NAME],
        ).fetchone()
    assert left == 0, "close() lets the connections go"


def test_a_pooled_connection_the_server_ended_is_replaced(database_url):
    registry = durajobs.Registry(database_url=database_url)
    try:
        before = registry.run(_backend_pid())
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(%s)", [before])
        after = registry.run(_backend_pid())
        assert after != before
    finally:
        registry.close()


def test_the_pool_refuses_a_database_without_the_schema(empty_database_url):
    registry = durajobs.Registry(database_url=empty_database_url)
    with pytest.raises(durajobs.SchemaVersionMismatch, match="durajobs migrate"):
        registry.run(calls.version())
    registry.close()


def test_async_direct_enqueues_take_the_same_pool(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "pooled-async", input=Numbered, idempotency_key=lambda i: f"pa:{i.n}")
    async def pooled(ctx): ...

    async def scenario() -> set[int]:
        pids = {await registry.run_async(_backend_pid())}
        for n in range(5):
            await pooled.enqueue_async({"n": n})
        pids.add(await registry.run_async(_backend_pid()))
        pids.add(registry.run(_backend_pid()))
        return pids

    try:
        assert len(asyncio.run(scenario())) == 1, "sync and async share one pooled connection"
        with psycopg.connect(database_url, autocommit=True) as observer:
            (held,) = observer.execute(
                "select count(*) from pg_stat_activity where application_name = %s",
                [APPLICATION_NAME],
            ).fetchone()
            (stored,) = observer.execute(
                "select count(*) from jobs.jobs where name = 'pooled-async'"
            ).fetchone()
        assert held == 1
        assert stored == 5
    finally:
        registry.close()
