"""What one session cannot show: claimers racing on the same rows, and leases that lapse."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import durajobs
from durajobs import Fence
from durajobs._db import calls
from durajobs._db.execute import execute


def _enqueue_backlog(client: durajobs.Client, count: int, queue: str = "default") -> set[Any]:
    ids: set[Any] = set()
    for start in range(0, count, 5_000):
        requests = [
            {"name": "race", "input": {"n": n}, "idempotency_key": f"race:{n}", "queue": queue}
            for n in range(start, min(start + 5_000, count))
        ]
        ids.update(result.id for result in client.enqueue_many(requests))
    return ids


def _claim_together(database_url: str, sessions: int, batch_size: int) -> list[list[Any]]:
    """Have `sessions` connections claim at the same instant, each inside an open transaction."""
    barrier = threading.Barrier(sessions)
    answers: list[list[Any]] = [[] for _ in range(sessions)]
    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            with psycopg.connect(database_url) as connection:
                barrier.wait()
                rows = execute(
                    connection, calls.claim(["default"], f"w{index}", batch_size=batch_size)
                )
                # hold the locks until every claimer has claimed, so the race is real
                barrier.wait()
                connection.commit()
                answers[index] = [row.id for row in rows]
        except BaseException as error:  # surfaced below
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return answers


@pytest.mark.parametrize("sessions", [2, 4])
def test_concurrent_claimers_get_disjoint_rows(client, database_url, sessions):
    backlog = _enqueue_backlog(client, 40)

    answers = _claim_together(database_url, sessions, batch_size=10)

    claimed = [job_id for answer in answers for job_id in answer]
    assert len(claimed) == len(set(claimed)), "a row was handed to two claimers"
    assert set(claimed) <= backlog
    # skip locked lets each claimer take a full batch past the others' locked rows
    assert all(len(answer) == 10 for answer in answers)


def test_twenty_thousand_jobs_four_claimers_each_acked_exactly_once(client, database_url):
    backlog = _enqueue_backlog(client, 20_000)
    acked: Counter[Any] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        worker = f"worker-{index}"
        try:
            with durajobs.Client.connect(database_url) as own:
                while True:
                    jobs = own.claim(["default"], worker, batch_size=100)
                    if not jobs:
                        return
                    landed = own.ack_many(worker, [j.id for j in jobs], [j.claim for j in jobs])
                    with lock:
                        acked.update(result.id for result in landed if result.landed)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not errors, errors
    assert set(acked) == backlog
    assert max(acked.values()) == 1
    states = client.connection.execute(
        "select state, count(*), max(attempt), max(claims) from jobs.jobs group by state"
    ).fetchall()
    assert states == [("done", 20_000, 1, 1)]


def _pin_clock(client: durajobs.Client, instant: datetime | None) -> None:
    """Make jobs._now() read `instant` on this client's session (the claim reads no other)."""
    assert instant is not None
    client.connection.execute("select set_config('durajobs.now', %s, false)", [instant.isoformat()])


def test_a_lapsed_lease_is_retaken_by_another_worker(client, connect):
    job = client.enqueue("lapse", {}, "lapse:1")
    other = durajobs.Client(connect())

    first = client.claim(["default"], "dies", visibility=timedelta(milliseconds=200))
    assert [j.id for j in first] == [job.id]
    assert other.claim(["default"], "survivor") == []  # leased: not handed out twice

    # the lease lapses on the database's clock: move the survivor's session past it
    _pin_clock(other, first[0].lease_expires_at + timedelta(seconds=1))
    retaken = other.claim(["default"], "survivor")

    assert [j.id for j in retaken] == [job.id]
    assert retaken[0].attempt == 2
    assert retaken[0].claim > first[0].claim
    assert other.ack(Fence(job.id, "survivor", retaken[0].claim)) is True


def test_a_token_from_before_a_reclaim_cannot_ack_even_under_the_same_worker(client, connect):
    job = client.enqueue("fenced", {}, "fenced:1")
    stale = client.claim(["default"], "w", visibility=timedelta(milliseconds=100))[0]
    later = durajobs.Client(connect())
    _pin_clock(later, stale.lease_expires_at + timedelta(seconds=1))
    fresh = later.claim(["default"], "w")[0]
    assert fresh.id == job.id
    assert fresh.claim > stale.claim

    assert client.ack(Fence(job.id, "w", stale.claim)) is False
    assert client.nack(Fence(job.id, "w", stale.claim), error="late") is False
    assert client.heartbeat(Fence(job.id, "w", stale.claim)) is durajobs.HeartbeatAnswer.LOST
    with pytest.raises(durajobs.errors.JobLeaseLost):
        client.record_step(
            Fence(job.id, "w", stale.claim), "late-step", durajobs.StepStatus.COMPLETED
        )

    row = client.connection.execute(
        "select state, claims, last_error from jobs.jobs where id = %s", [job.id]
    ).fetchone()
    assert row == ("running", fresh.claim, None)
    assert client.ack(Fence(job.id, "w", fresh.claim)) is True


def test_a_claim_passes_over_locked_rows_instead_of_waiting(client, connect, database_url):
    """skip locked: a claimer passes over rows another transaction holds instead of waiting."""
    client.enqueue("held", {}, "held:1")
    client.enqueue("held", {}, "held:2")
    holder = psycopg.connect(database_url)
    try:
        holder.execute("select id from jobs.jobs_live order by id limit 1 for update")
        other = durajobs.Client(connect())
        other.connection.execute("set statement_timeout = '2s'")
        taken = other.claim(["default"], "w", batch_size=2)
        assert len(taken) == 1
    finally:
        holder.close()
