"""What one job costs the server in enqueue, claim and ack: bench/results/sql-per-job.md and
bench/results/live-history-split.md.

    .venv/bin/python bench/sql_per_job.py "host=localhost port=5432 user=postgres dbname=postgres"

Each round makes scratch databases next to the one named (dropped after), migrates them with
this tree's durajobs to a revision, and times from one connection, with nothing else running:
20,000 jobs enqueued through jobs.enqueue_many (1,000 a call), claimed 500 at a time
(jobs.claim_v1 without lapsed recovery) and acked 500 at a time through jobs.ack_many_v1. It
prints a markdown table of medians over four rounds, the revisions taken in turn: 0006 (one
table, finished rows updated in place) and the head (0007 on: a live table, and a history the
ack moves the row to). The first measurement, of each index's share in 0006, is in
sql-per-job.md; this tree no longer runs it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid

import psycopg

import durajobs

JOBS = 20_000
ROUNDS = 4
CLAIM = (
    "select id, claim from jobs.claim_v1(queues => array['bench'], worker_id => 'w',"
    " batch_size => 500, recover_lapsed => false)"
)


def scratch(admin: str) -> str:
    name = f"sql_per_job_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"create database {name}")
    return name


ACK = "select count(*) from jobs.ack_many_v1('w', %s::uuid[], %s::bigint[])"


def measure(admin: str, revision: str) -> dict[str, float]:
    """Microseconds a job of enqueue, claim and ack in a fresh database at `revision`."""
    name = scratch(admin)
    url = psycopg.conninfo.make_conninfo(admin, dbname=name)
    try:
        durajobs.migrate(url, revision)
        with psycopg.connect(url, autocommit=True) as connection:
            began = time.perf_counter()
            for first in range(0, JOBS, 1000):
                requests = [
                    {"name": "noop", "queue": "bench", "input": {"i": i}, "idempotency_key": str(i)}
                    for i in range(first, first + 1000)
                ]
                connection.execute(
                    "select count(*) from jobs.enqueue_many(%s::jsonb)", (json.dumps(requests),)
                )
            enqueue = time.perf_counter() - began
            hot = "jobs.jobs_live" if revision == "head" else "jobs.jobs"
            connection.execute(f"vacuum analyze {hot}")
            claim = acked = 0.0
            while True:
                began = time.perf_counter()
                rows = connection.execute(CLAIM).fetchall()
                claim += time.perf_counter() - began
                if not rows:
                    break
                ids = "{" + ",".join(str(row[0]) for row in rows) + "}"
                claims = "{" + ",".join(str(row[1]) for row in rows) + "}"
                began = time.perf_counter()
                connection.execute(ACK, (ids, claims))
                acked += time.perf_counter() - began
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"drop database {name} with (force)")
    return {"enqueue": enqueue / JOBS * 1e6, "claim": claim / JOBS * 1e6, "ack": acked / JOBS * 1e6}


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


REVISIONS = {
    "0006: one table, a finished row updated in place": "0006",
    "head: live table, a finished row moved to the history": "head",
}


def main(admin: str) -> None:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in REVISIONS}
    for round_ in range(ROUNDS):
        # in turn, and the order flipped each round: the second of a pair ran measurably slower
        order = list(REVISIONS.items())
        for name, revision in order if round_ % 2 == 0 else reversed(order):
            runs[name].append(measure(admin, revision))
    print("| schema | enqueue us/job | claim us/job | ack us/job | sum |")
    print("|---|---|---|---|---|")
    for name, measured in runs.items():
        m = medians(measured)
        total = sum(m.values())
        print(f"| {name} | {m['enqueue']:.1f} | {m['claim']:.1f} | {m['ack']:.1f} | {total:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
