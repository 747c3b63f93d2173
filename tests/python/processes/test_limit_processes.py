"""Concurrency limits across real worker processes: the overlap each handler's own start and end
rows show (support.apps.limited) never exceeds the declared limit, per key when keyed, and a
SIGKILLed holder's place comes back when its lapsed run is re-taken and ends."""

from __future__ import annotations

import signal
import time

import psycopg
import pytest

import durajobs
from support.apps.limited import EFFECTS, registry
from support.limit_effects import one, peak, stop, wait_done, wait_registered, worker


@pytest.fixture
def effects(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(EFFECTS)
    return database_url


def test_two_workers_never_run_more_than_the_limit(effects):
    database_url = effects
    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")  # both workers would; first one wins
    workers = [worker(database_url, "--concurrency", "8") for _ in range(2)]
    try:
        wait_registered(database_url, 2)  # so the work reaches both
        with durajobs.Client.connect(database_url) as client:
            for n in range(60):
                registry.get("one-at-a-time").enqueue({"n": n}, using=client)  # type: ignore[union-attr]
                registry.get("three-at-a-time").enqueue({"n": n}, using=client)  # type: ignore[union-attr]
                registry.get("per-account").enqueue(  # type: ignore[union-attr]
                    {"n": n, "key": f"acct-{n % 6}"}, using=client
                )
                registry.get("unlimited").enqueue({"n": n}, using=client)  # type: ignore[union-attr]
        wait_done(
            database_url,
            ["one-at-a-time", "three-at-a-time", "per-account", "unlimited"],
            240,
            timeout=90,
        )
    finally:
        logs = [stop(worker) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), logs

    assert peak(database_url, "one-at-a-time") == 1
    assert 2 <= peak(database_url, "three-at-a-time") <= 3, "the limit is 3, and 3 can run"
    assert peak(database_url, "per-account", per_key=True) == 1
    assert peak(database_url, "per-account") >= 2, "different keys run side by side"
    assert peak(database_url, "unlimited") > 3, "an unlimited job is not held to any limit"
    (runs, distinct_runs) = one(
        database_url, "select count(*), count(distinct (job, n)) from limit_effects"
    )
    assert runs == distinct_runs == 240, "each job ran exactly once"
    (pids,) = one(database_url, "select count(distinct pid) from limit_effects")
    assert pids == 2, "both workers took part"


def test_a_killed_holder_gives_its_place_back_once_its_run_is_retaken(effects):
    database_url = effects
    job = registry.get("one-at-a-time")
    assert job is not None
    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        job.enqueue({"n": 1, "first_attempt_seconds": 60}, using=client)
    holder = worker(database_url, "--visibility", "1", "--queues", "default")
    try:
        deadline = time.monotonic() + 30
        while one(database_url, "select count(*) from limit_effects")[0] == 0:
            assert time.monotonic() < deadline, "the holder never started its run"
            time.sleep(0.05)
        with durajobs.Client.connect(database_url) as client:
            job.enqueue({"n": 2}, using=client)  # waits: the holder runs the one place
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
    killed_at = time.monotonic()
    with psycopg.connect(database_url, autocommit=True) as connection:
        # the killed body's run ended with its process
        connection.execute("update limit_effects set ended = clock_timestamp() where ended is null")
    successor = worker(database_url, "--visibility", "1", "--queues", "default")
    try:
        wait_done(database_url, ["one-at-a-time"], 2, timeout=20)
    finally:
        stop(successor)
    assert time.monotonic() - killed_at < 15, "the place came back within a few leases"
    rows = {
        n: (attempt, state)
        for n, attempt, state in psycopg.connect(database_url, autocommit=True)
        .execute("select (input->>'n')::int, attempt, state from jobs.jobs")
        .fetchall()
    }
    assert rows == {1: (2, "done"), 2: (1, "done")}, "the killed run was re-taken, then n=2 ran"
    assert peak(database_url, "one-at-a-time") == 1
