"""The claim pipeline: the next claim is sent while the rows of the last are started, without
ever holding more rows than the worker has slots, and finished rows never pile up unacked."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta

import pytest

import durajobs
from durajobs._db import calls
from durajobs.runtime import claimer
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import TimedItem
from support.rows import fetch_all
from support.running import run_until


def _enqueue_many(job: object, count: int) -> None:
    for n in range(count):
        job.enqueue({"key": f"k{n}", "seconds": 0.03})  # type: ignore[attr-defined]


def test_a_claim_sent_ahead_never_takes_more_rows_than_free_slots(database_url, monkeypatch):
    """With claims of at most 3 rows and 4 slots, the claim sent ahead of a batch's start may
    ask for 1 row only: counting the batch's rows as taken is what keeps 4 the peak."""
    monkeypatch.setattr(claimer, "MAX_CLAIM", 3)
    registry = durajobs.Registry(database_url=database_url)
    running = {"now": 0, "peak": 0}
    started: dict[str, float] = {}

    @declare(registry, "paced", input=TimedItem)
    async def paced(ctx):
        started[ctx.input.key] = time.monotonic()
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(ctx.input.seconds)
        running["now"] -= 1

    _enqueue_many(paced, 24)
    worker = Worker(registry, database_url, listen=False, concurrency=4)
    claims: list[tuple[float, float, list[str]]] = []
    real_run = worker.db.run

    async def timed(call):
        sent = time.monotonic()
        answer = await real_run(call)
        if call.function == "jobs.claim_v1":
            claims.append((sent, time.monotonic(), [row.input["key"] for row in answer]))
        return answer

    worker.db.run = timed  # type: ignore[method-assign]
    asyncio.run(run_until(worker, lambda: worker.stats().completed == 24))
    assert running["peak"] == 4
    # some claim left before the rows of the claim before it had started: the pipe was full
    ahead = [
        later
        for earlier, later in itertools.pairwise(claims)
        if earlier[2] and later[0] < min(started[key] for key in earlier[2])
    ]
    assert ahead, "every claim waited for the rows of the last one to start"
    assert max(len(keys) for _sent, _answered, keys in claims) <= 3


def test_finished_rows_wait_for_slots_rather_than_pile_up_unacked(database_url):
    """Acks that take the database 200 ms each: without counting a queued ack as a taken slot,
    the worker would claim and finish all 60 rows while they stayed 'running' in the table."""
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "quick", input=TimedItem)
    async def quick(ctx):
        return None

    for n in range(60):
        quick.enqueue({"key": f"k{n}"})
    worker = Worker(registry, database_url, listen=False, concurrency=5)
    real_run = worker.settle_db.run
    most_running = {"n": 0}

    async def slow_acks(call):
        if call.function == "jobs.ack_many_v1":
            (running,) = fetch_all(
                database_url, "select count(*) from jobs.jobs where state = 'running'"
            )[0]
            most_running["n"] = max(most_running["n"], running)
            await asyncio.sleep(0.2)
        return await real_run(call)

    worker.settle_db.run = slow_acks  # type: ignore[method-assign]
    asyncio.run(run_until(worker, lambda: worker.stats().completed == 60, timeout=60))
    # at most: 5 bodies, 5 finished rows waiting for a statement, 5 in the one on the wire
    assert most_running["n"] <= 15
    assert fetch_all(database_url, "select state, count(*) from jobs.jobs group by 1") == [
        ("done", 60)
    ]


@pytest.mark.parametrize("stop", ["stop", "drain"])
def test_rows_of_a_claim_sent_ahead_go_back_uncounted_when_the_worker_stops(
    database_url, monkeypatch, stop
):
    monkeypatch.setattr(claimer, "MAX_CLAIM", 2)
    registry = durajobs.Registry(database_url=database_url)
    seen: list[str] = []

    @declare(registry, "held", input=TimedItem)
    async def held(ctx):
        seen.append(ctx.input.key)
        await asyncio.sleep(ctx.input.seconds)

    _enqueue_many(held, 40)
    worker = Worker(registry, database_url, listen=False, concurrency=6)

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        while len(seen) < 8:
            await asyncio.sleep(0.005)
        worker.stop() if stop == "stop" else worker.drain()
        await asyncio.wait_for(runner, 30)

    asyncio.run(scenario())
    # every row is either done (its body ran once) or waiting with no attempt spent
    rows = fetch_all(database_url, "select state, attempt, count(*) from jobs.jobs group by 1, 2")
    states = {(state, attempt): count for state, attempt, count in rows}
    assert set(states) <= {("done", 1), ("ready", 0)}
    assert states.get(("done", 1), 0) + states.get(("ready", 0), 0) == 40
    assert len(seen) == len(set(seen))
    if stop == "stop":
        assert states.get(("done", 1), 0) == len(seen)


def test_a_worker_claim_writes_awkward_names_as_literals_the_server_reads_back(database_url):
    """The worker's claim carries its queues, its id and the jobs to drop as SQL literals:
    quotes, commas, braces and backslashes in them reach the server as the same strings."""
    queue = 'it\'s, {a} \\ "queue"'
    worker_id = "host:'1':{w}"
    with durajobs.Client.connect(database_url) as client:
        client.enqueue("odd", {"n": 1}, "k-1", queue=queue)
        client.enqueue("odd", {"n": 2}, "k-2", queue="plain")
        statement = calls.WorkerClaim(
            [queue],
            worker_id,
            visibility=timedelta(seconds=7),
            drop_exhausted=["a,b", "it's"],
        )
        rows = client.run(statement(10, recover_lapsed=True))
        assert [(row.queue, row.input) for row in rows] == [(queue, {"n": 1})]
        assert rows[0].fence.worker_id == worker_id
        (held,) = fetch_all(
            database_url,
            "select claimed_by, lease_expires_at - claimed_at from jobs.jobs where id = %s",
            [rows[0].id],
        )
        assert held == (worker_id, timedelta(seconds=7))
