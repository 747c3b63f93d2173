"""The planner's stale picture of the job table against the claim and the ack: a backlog of
jobs drained by durajobs' own claim and ack (batches of 500, one session, as a worker's), in
three states of what the planner knows of jobs.jobs_live:

- known: the backlog enqueued and analyzed before the drain starts;
- drained: an analyze saw the table empty (as autovacuum does between bursts), then the backlog
  came: the statistics say no rows on pages that are full again;
- a page: the session's plans were made while the table was a page (a fresh install, six rounds
  of ten jobs), then the backlog came.

Each drain's jobs/s, and its ratio to the known state's. A plan that takes the backlog for empty
reads all of it on each call: before revision 0016 a soak's worker fell to 50 jobs/s that way.

    bench/stale_stats.py --database-url URL [--jobs 30000] [--reps 2]
        (drops and re-creates the schema `jobs` there)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

BATCH = 500
CLAIM = (
    "select id, claim from jobs.claim_v1(queues => array['bench'], worker_id => 'w1',"
    " batch_size => %s, visibility => interval '30 s')"
)
ACK = "select count(*) from jobs.ack_many_v1('w1', %s::uuid[], %s::bigint[])"
DURAJOBS = str(Path(sys.executable).with_name("durajobs"))
Connection = psycopg.Connection[Any]


def _fresh_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("drop schema if exists jobs cascade")
        connection.execute("drop table if exists public.alembic_version")
    subprocess.run([DURAJOBS, "migrate", "--database-url", url], check=True, capture_output=True)


def _enqueue(connection: Connection, tag: str, jobs: int) -> None:
    for start in range(0, jobs, 1000):
        rows = [
            {"name": "noop", "queue": "bench", "input": {}, "idempotency_key": f"{tag}.{n}"}
            for n in range(start, min(start + 1000, jobs))
        ]
        connection.execute("select count(*) from jobs.enqueue_many(%s::jsonb)", [json.dumps(rows)])


def _drain(worker: Connection, batch: int = BATCH) -> int:
    done = 0
    while True:
        rows = worker.execute(CLAIM, [batch]).fetchall()
        if not rows:
            return done
        worker.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows]])
        done += len(rows)


def _timed_drain(worker: Connection, jobs: int) -> float:
    started = time.perf_counter()
    done = _drain(worker)
    elapsed = time.perf_counter() - started
    if done != jobs:
        raise RuntimeError(f"drained {done} of {jobs} jobs")
    return jobs / elapsed


def known(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    _drain(worker)
    _enqueue(admin, tag, jobs)
    admin.execute("analyze jobs.jobs_live")
    return _timed_drain(worker, jobs)


def drained(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    # fill the table's pages once, so that the drained analyze finds pages and no rows
    _enqueue(admin, tag + "-fill", jobs)
    _drain(worker)
    admin.execute("vacuum analyze jobs.jobs_live")
    _enqueue(admin, tag, jobs)
    return _timed_drain(worker, jobs)


def a_page(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    _drain(worker)
    admin.execute("vacuum (truncate true, analyze) jobs.jobs_live")
    for round_ in range(6):  # the plan cache keeps a generic plan from the sixth call
        _enqueue(admin, f"{tag}-small{round_}", 10)
        _drain(worker, batch=10)
    _enqueue(admin, tag, jobs)
    return _timed_drain(worker, jobs)


STATES: dict[str, Callable[[Connection, Connection, int, str], float]] = {
    "known": known,
    "drained": drained,
    "a page": a_page,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[float]] = {state: [] for state in STATES}
    for rep in range(args.reps):
        for state, measure in STATES.items():
            _fresh_schema(args.database_url)
            with (
                psycopg.connect(args.database_url, autocommit=True) as admin,
                psycopg.connect(args.database_url, autocommit=True) as worker,
            ):
                rate = measure(admin, worker, args.jobs, f"r{rep}")
            results[state].append(rate)
            print(f"rep {rep + 1} {state}: {rate:,.0f} jobs/s", file=sys.stderr)
    base = statistics.median(results["known"])
    print(f"{args.jobs:,} jobs drained by claim_v1 and ack_many_v1, batches of {BATCH}\n")
    print("| planner's picture | jobs/s (median) | runs | / known |")
    print("|---|---|---|---|")
    for state, rates in results.items():
        median = statistics.median(rates)
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"| {state} | {median:,.0f} | {runs} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
