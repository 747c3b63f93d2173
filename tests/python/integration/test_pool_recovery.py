"""A pool whose connections the server ended (a restart, terminated backends) serves the next
call at once: each dead connection is found with one round trip and replaced, never slept on.
psycopg_pool's own check sleeps 1, 2, 4 s ... between dead connections, which held a worker's
claims, lease renewals and acks for up to 30 s after its backends were cut."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from durajobs._db import calls, database
from durajobs._db.database import AsyncDatabase
from durajobs._db.execute import SCHEMA_VERSION


def _terminate_all_but(database_url: str, keep: int) -> int:
    with psycopg.connect(database_url, autocommit=True) as admin:
        rows = admin.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid() and pid <> %s",
            [keep],
        ).fetchall()
    return len(rows)


@pytest.mark.parametrize("connections", [1, 6])
def test_calls_after_every_connection_was_terminated_are_served_at_once(
    database_url, monkeypatch, connections
):
    # every connection back in the pool is checked, as one idle past the trust window is
    monkeypatch.setattr(database, "CHECK_AFTER_IDLE_SECONDS", 0.0)

    async def scenario() -> tuple[int, float, list[int]]:
        db = AsyncDatabase(database_url, min_size=connections, max_size=connections)
        await db.open()
        try:
            hold = calls.Call("pg_sleep", "select pg_sleep(0.05)", {}, lambda rows: None)
            await asyncio.gather(*(db.run(hold) for _ in range(connections)))  # all opened
            ended = _terminate_all_but(database_url, keep=0)
            began = time.monotonic()
            answers = await asyncio.gather(*(db.run(calls.version()) for _ in range(3)))
            return ended, time.monotonic() - began, answers
        finally:
            await db.close()

    ended, took, answers = asyncio.run(scenario())
    assert ended >= connections, "the pool's connections were all terminated"
    assert answers == [SCHEMA_VERSION] * 3
    # the pool's own check slept at least 1 s after the first dead connection
    assert took < 1.0, f"the calls waited {took:.2f} s for a live connection"


def test_a_call_waits_no_longer_than_its_wait_timeout_for_a_connection(database_url):
    async def scenario() -> float:
        db = AsyncDatabase(database_url, min_size=1, max_size=1, wait_timeout=0.3)
        await db.open()
        try:
            hold = calls.Call("pg_sleep", "select pg_sleep(2)", {}, lambda rows: None)
            holder = asyncio.ensure_future(db.run(hold))
            await asyncio.sleep(0.1)
            began = time.monotonic()
            with pytest.raises(Exception, match="couldn't get a connection"):
                await db.run(calls.version())
            took = time.monotonic() - began
            await holder
            return took
        finally:
            await db.close()

    assert asyncio.run(scenario()) < 1.5


def test_a_worker_works_again_at_once_after_bursts_of_terminated_backends(database_url):
    """Five bursts of pg_terminate_backend, 0.2 s apart, on every session but the test's own,
    while a worker drains jobs: a job enqueued after the last burst completes within 2 s, and
    no job that was done when the bursts ended runs again."""
    import durajobs
    from durajobs.runtime.worker import Worker
    from support.factory import declare
    from support.models import Numbered

    registry = durajobs.Registry(database_url=database_url)
    runs: list[tuple[int, float]] = []

    @declare(registry, "burst", input=Numbered, idempotency_key=lambda i: f"b:{i.n}")
    async def burst(ctx) -> None:
        runs.append((ctx.input.n, time.monotonic()))
        await asyncio.sleep(0.01)

    with durajobs.Client.connect(database_url) as client:
        for first in range(0, 400, 100):
            client.enqueue_many(
                [{"name": "burst", "input": {"n": n}, "idempotency_key": f"b:{n}"}
                 for n in range(first, first + 100)]
            )  # fmt: skip

    def done_ids() -> set[int]:
        with psycopg.connect(database_url, autocommit=True) as observer:
            rows = observer.execute(
                "select (input->>'n')::int from jobs.jobs where state = 'done'"
            ).fetchall()
        return {row[0] for row in rows}

    async def scenario() -> tuple[float, set[int], float]:
        worker = Worker(registry, database_url, visibility=3, listen=True)
        runner = asyncio.ensure_future(worker.run())
        try:
            while len(runs) < 20:
                await asyncio.sleep(0.01)
            for _ in range(5):
                await asyncio.to_thread(_terminate_all_but, database_url, 0)
                await asyncio.sleep(0.2)
            ended = time.monotonic()
            finished = await asyncio.to_thread(done_ids)
            with durajobs.Client.connect(database_url) as client:
                client.enqueue("burst", {"n": 10_000}, "b:10000")
            while not any(n == 10_000 for n, _ in runs):
                assert time.monotonic() - ended < 10, "the worker never ran the marker job"
                await asyncio.sleep(0.02)
            marker = next(at for n, at in runs if n == 10_000) - ended
            while len(await asyncio.to_thread(done_ids)) < 401:
                assert time.monotonic() - ended < 30, "the backlog never drained"
                await asyncio.sleep(0.05)
            return ended, finished, marker
        finally:
            worker.stop()
            await asyncio.wait_for(runner, 30)

    ended, finished, marker = asyncio.run(scenario())
    assert marker < 2.0, f"the worker took {marker:.2f} s after the bursts to run a new job"
    rerun = {n for n, at in runs if at > ended and n in finished}
    assert rerun == set(), f"jobs done before the bursts ended ran again: {sorted(rerun)[:10]}"


def test_a_connection_back_from_a_call_moments_ago_is_trusted_without_a_round_trip(
    database_url, monkeypatch
):
    """Within CHECK_AFTER_IDLE_SECONDS of its last call, a connection runs the next call with no
    empty query first; past it (here: at once), every call is checked."""
    # a window shorter than the five calls take: each is trusted for its last call's return,
    # not for the pool's opening
    monkeypatch.setattr(database, "CHECK_AFTER_IDLE_SECONDS", 0.3)
    checks: list[str] = []
    real_execute = psycopg.AsyncConnection.execute

    async def counting(self, query, *args, **kwargs):
        if query == "":
            checks.append("check")
        return await real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counting)

    async def five_calls() -> list[int]:
        db = AsyncDatabase(database_url, min_size=1, max_size=1)
        await db.open()
        try:
            answers = []
            for _ in range(5):
                await asyncio.sleep(0.15)
                answers.append(await db.run(calls.version()))
            return answers
        finally:
            await db.close()

    assert asyncio.run(five_calls()) == [SCHEMA_VERSION] * 5
    assert checks == [], "a connection that just answered was checked again"

    monkeypatch.setattr(database, "CHECK_AFTER_IDLE_SECONDS", 0.0)
    assert asyncio.run(five_calls()) == [SCHEMA_VERSION] * 5
    assert len(checks) == 5
