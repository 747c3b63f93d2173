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
import statistics
import sys
import time
from collections.abc import Callable

import psycopg
from drain_loop import Connection, drain, enqueue, fresh_schema

BATCH = 500
CLAIM = (
    "select id, claim from jobs.claim_v1(queues => array['bench'], worker_id => 'w1',"
    " batch_size => %s, visibility => interval '30 s')"
)


def _timed_drain(worker: Connection, jobs: int) -> float:
    started = time.perf_counter()
    done = drain(worker, CLAIM, BATCH)
    elapsed = time.perf_counter() - started
    if done != jobs:
        raise RuntimeError(f"drained {done} of {jobs} jobs")
    return jobs / elapsed


def known(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    drain(worker, CLAIM, BATCH)
    enqueue(admin, tag, jobs)
    admin.execute("analyze jobs.jobs_live")
    return _timed_drain(worker, jobs)


def drained(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    # fill the table's pages once, so that the drained analyze finds pages and no rows
    enqueue(admin, tag + "-fill", jobs)
    drain(worker, CLAIM, BATCH)
    admin.execute("vacuum analyze jobs.jobs_live")
    enqueue(admin, tag, jobs)
    return _timed_drain(worker, jobs)


def a_page(admin: Connection, worker: Connection, jobs: int, tag: str) -> float:
    drain(worker, CLAIM, BATCH)
    admin.execute("vacuum (truncate true, analyze) jobs.jobs_live")
    for round_ in range(6):  # the plan cache keeps a generic plan from the sixth call
        enqueue(admin, f"{tag}-small{round_}", 10)
        drain(worker, CLAIM, 10)
    enqueue(admin, tag, jobs)
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
            fresh_schema(args.database_url)
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
