"""The worker's vacuum of jobs.jobs_live (durajobs.runtime.upkeep): when a dry claim lets it look
and the dead tuples ask for it, that it runs once at a time, and that a role that may not vacuum
the table is told once."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import psycopg

import durajobs
from durajobs.runtime.upkeep import HotTableUpkeep
from durajobs.runtime.worker import Worker
from support.events import recorded
from support.factory import declare
from support.rows import fetch_all
from support.running import run_until


def _vacuums(database_url: str) -> int:
    [(count,)] = fetch_all(
        database_url,
        "select vacuum_count from pg_stat_user_tables where relid = 'jobs.jobs_live'::regclass",
    )
    return int(count)


def _dead_rows(database_url: str, count: int) -> None:
    """`count` jobs run through the live table by SQL: two dead row versions each."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "select count(*) from jobs.enqueue_many(("
            " select jsonb_agg(jsonb_build_object('name', 'd', 'queue', 'dead',"
            " 'input', '{}'::jsonb, 'idempotency_key', 'd' || g))"
            " from generate_series(1, %s) g))",
            [count],
        )
        rows = connection.execute(
            "select id, claim from jobs.claim_v1(array['dead'], 'w', batch_size => %s)", [count]
        ).fetchall()
        for job_id, claim in rows:
            connection.execute("select jobs.ack_v1(%s, 'w', %s)", [job_id, claim])
        # this backend's counts reach pg_stat_user_tables when it next goes idle
        connection.execute("select pg_stat_force_next_flush()")
        connection.execute("select 1")


def test_a_dry_claim_looks_and_only_enough_dead_tuples_start_a_vacuum(database_url):
    async def scenario() -> None:
        upkeep = HotTableUpkeep(database_url, dead_tuples=100, interval=30)
        upkeep.observe(500, 500)  # a full batch: busy, not the moment
        assert upkeep._task is None
        before = _vacuums(database_url)
        upkeep.observe(500, 3)
        assert upkeep._task is not None
        await upkeep._task
        assert upkeep.vacuums == 0, "a clean table is not vacuumed"
        assert _vacuums(database_url) == before

        _dead_rows(database_url, 200)
        upkeep._last = None
        upkeep.observe(500, 0)
        first = upkeep._task
        assert first is not None
        upkeep.observe(500, 0)
        assert upkeep._task is first, "one look at a time"
        await first
        assert upkeep.vacuums == 1
        assert _vacuums(database_url) == before + 1
        upkeep.observe(500, 0)
        assert upkeep._task is first, "not again within the interval"

    asyncio.run(scenario())


def test_one_vacuum_at_a_time_across_workers(database_url):
    """A second worker's vacuum finds the fleet-wide lock taken and skips."""

    async def scenario() -> None:
        with psycopg.connect(database_url, autocommit=True) as holder:
            holder.execute("select pg_advisory_lock(hashtext('durajobs.vacuum_hot_table'))")
            upkeep = HotTableUpkeep(database_url, dead_tuples=0)
            before = _vacuums(database_url)
            upkeep.observe(10, 0)
            assert upkeep._task is not None
            await upkeep._task
        assert upkeep.vacuums == 0
        assert _vacuums(database_url) == before

    asyncio.run(scenario())


def test_a_role_that_may_not_vacuum_is_told_once_and_not_asked_again(database_url):
    async def scenario() -> None:
        role = f"no_vacuum_{uuid4().hex[:8]}"
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"create role {role} login password 'pw'")
            admin.execute(f"grant usage on schema jobs to {role}")
            try:
                url = psycopg.conninfo.make_conninfo(database_url, user=role, password="pw")
                upkeep = HotTableUpkeep(url, dead_tuples=0)
                with recorded("durajobs.runtime.upkeep", "jobs.worker.vacuum-refused") as refused:
                    upkeep.observe(10, 0)
                    assert upkeep._task is not None
                    await upkeep._task
                assert len(refused) == 1
                assert "jobs_live" in refused[0]["reason"]
                assert not upkeep.enabled
                upkeep._last = None
                upkeep.observe(10, 0)
                assert upkeep._task.done(), "a refused worker does not ask again"
            finally:
                admin.execute(f"drop owned by {role}")
                admin.execute(f"drop role {role}")

    asyncio.run(scenario())


def test_a_worker_vacuums_the_hot_table_when_its_queues_run_dry(database_url):
    async def scenario() -> None:
        registry = durajobs.Registry(database_url=database_url)
        done: list[str] = []

        @declare(registry, "vac")
        async def body(ctx):
            done.append(ctx.input.key)

        for n in range(50):
            body.enqueue({"key": f"k{n}"})
        worker = Worker(registry, database_url, concurrency=10, poll_floor="20ms")
        worker.upkeep.dead_tuples = 0  # any dead tuple asks for a vacuum here
        before = _vacuums(database_url)
        await run_until(worker, lambda: len(done) == 50 and worker.upkeep.vacuums >= 1)
        assert _vacuums(database_url) >= before + 1
        assert sorted(done) == sorted(f"k{n}" for n in range(50))

    asyncio.run(scenario())


def test_a_worker_told_not_to_vacuum_does_not(database_url):
    async def scenario() -> None:
        registry = durajobs.Registry(database_url=database_url)
        done: list[str] = []

        @declare(registry, "novac")
        async def body(ctx):
            done.append(ctx.input.key)

        body.enqueue({"key": "k"})
        worker = Worker(registry, database_url, vacuum_hot_table=False, poll_floor="20ms")
        worker.upkeep.dead_tuples = 0
        before = _vacuums(database_url)
        await run_until(worker, lambda: len(done) == 1)
        await asyncio.sleep(0.2)  # dry claims came and went
        assert worker.upkeep.vacuums == 0
        assert _vacuums(database_url) == before

    asyncio.run(scenario())


def test_a_vacuum_already_at_the_table_is_left_alone(database_url):
    """skip_locked: while another vacuum (here: a session holding its lock) works on the table,
    the worker's is skipped, and not counted."""

    async def scenario() -> None:
        with psycopg.connect(database_url) as holder:
            holder.execute("lock table jobs.jobs_live in share update exclusive mode")
            upkeep = HotTableUpkeep(database_url, dead_tuples=0)
            upkeep.observe(10, 0)
            assert upkeep._task is not None
            await asyncio.wait_for(upkeep._task, 10)
            holder.rollback()
        assert upkeep.vacuums == 0
        assert upkeep.enabled, "a busy table is not a refusal"

    asyncio.run(scenario())
