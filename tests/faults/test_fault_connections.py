"""Workers under load lose their database: every backend terminated in bursts, then the server
itself restarted. They claim and settle again within seconds of the fault's end, lose nothing,
and run a job twice only inside the fault window (at-least-once), never after it."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from kit import (
    Process,
    duplicates_after,
    enqueue,
    now,
    query,
    terminate_backends,
    unfinished,
    value,
    wait_for,
    worker,
)

VISIBILITY = 2.0
# a settle lost in the fault's last moment leaves its row running until the lease lapses, and
# lapsed leases are looked for about once a second: the run again lands up to then
WINDOW_AFTER = dt.timedelta(seconds=VISIBILITY + 2)


def _settled_since(url: str, since: dt.datetime) -> dict[str, dt.datetime]:
    """Each worker's first settle after `since`: claimed_by to finished_at."""
    return dict(
        query(
            url,
            "select claimed_by, min(finished_at) from jobs.jobs"
            " where state = 'done' and finished_at > %s group by claimed_by",
            [since],
        )
    )


def _both_back_within(url: str, since: dt.datetime, seconds: float, show) -> None:
    wait_for(
        lambda: len(_settled_since(url, since)) == 2,
        timeout=seconds,
        what=f"both workers to settle a job within {seconds} s of the fault's end",
        show=show,
    )


def _drain_and_check(url: str, jobs: int, fault_end: dt.datetime, workers) -> None:
    try:
        wait_for(lambda: unfinished(url) == 0, timeout=180, what="the backlog", show=workers)
    finally:
        for process in workers:
            assert process.stop() == 0, process.tail()
    assert value(url, "select count(*) from jobs.jobs where state = 'done'") == jobs
    never_ran = value(
        url,
        "select count(*) from jobs.jobs j"
        " where not exists (select 1 from effects e where e.run_id = j.run_id::text)",
    )
    assert never_ran == 0, "a job was marked done without its body's effect"
    late = duplicates_after(url, "ran", fault_end + WINDOW_AFTER)
    assert late == [], f"jobs ran again after the fault window: {late[:5]}"


def _two_workers_running(url: str, logs: Path) -> list[Process]:
    """Two worker processes on `url`, once each has run a job."""
    workers = [
        worker(url, logs / f"worker-{n}.log", visibility=VISIBILITY, in_flight=8) for n in range(2)
    ]
    wait_for(
        lambda: value(url, "select count(distinct pid) from effects") == 2,
        timeout=60,
        what="both workers running jobs",
        show=workers,
    )
    return workers


def test_bursts_of_terminated_backends(db, strength, tmp_path):
    jobs = strength.pick(4_000, 12_000)
    bursts_for = strength.pick(3, 10)  # seconds of terminations, one round each half second
    enqueue(db.url, "tick", [f"t{n}" for n in range(jobs)], ms=20)
    workers = _two_workers_running(db.url, tmp_path)
    terminated = 0
    deadline = time.monotonic() + bursts_for
    while time.monotonic() < deadline:
        terminated += terminate_backends(db.url, db.name)
        time.sleep(0.5)
    fault_end = now(db.url)
    assert terminated > 2 * bursts_for, "the bursts found no sessions to terminate"
    assert unfinished(db.url) > 0, "the backlog ran out during the bursts: raise the work"

    _both_back_within(db.url, fault_end, 2.0, workers)
    _drain_and_check(db.url, jobs, fault_end, workers)


def test_a_postgres_restart_under_load(db, strength, tmp_path):
    jobs, restarts = strength.pick(3_000, 9_000), strength.pick(1, 3)
    enqueue(db.url, "tick", [f"r{n}" for n in range(jobs)], ms=20)
    workers = _two_workers_running(db.url, tmp_path)
    fault_end = now(db.url)
    for _ in range(restarts):
        time.sleep(1)
        db.cluster.restart()  # a fast stop cuts every session, as a failover does
        fault_end = now(db.url)
        assert unfinished(db.url) > 0, "the backlog ran out before the restart: raise the work"
        # reconnecting: the pool's connect attempts and the wake listener's retry come first
        _both_back_within(db.url, fault_end, 5.0, workers)
    _drain_and_check(db.url, jobs, fault_end, workers)
