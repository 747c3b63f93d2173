"""What one job costs the server in enqueue, claim and ack, and how the indexes and the way a row
ends change that: bench/results/sql-per-job.md.

    .venv/bin/python bench/sql_per_job.py "host=localhost port=5432 user=postgres dbname=postgres"

Each round makes scratch databases next to the one named (dropped after), migrates them with
this tree's durajobs, and times from one connection, with nothing else running: 20,000 jobs
enqueued through jobs.enqueue_many (1,000 a call), claimed 500 at a time (jobs.claim_v1 without
lapsed recovery) and acked 500 at a time. It prints two markdown tables of medians over three
rounds: some indexes dropped, and the ack done three ways (today's function, a bare update, a
move to a history table).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable

import psycopg

import durajobs

JOBS = 20_000
ROUNDS = 3
CLAIM = (
    "select id, claim from jobs.claim_v1(queues => array['bench'], worker_id => 'w',"
    " batch_size => 500, recover_lapsed => false)"
)
DROPPED = {
    "all indexes": [],
    "without jobs_queue_created_idx": ["jobs_queue_created_idx"],
    "without jobs_done_idx": ["jobs_done_idx"],
    "without jobs_lease_idx": ["jobs_lease_idx"],
    "without the three": ["jobs_queue_created_idx", "jobs_done_idx", "jobs_lease_idx"],
}
ACKS = {
    "jobs.ack_many_v1 (fence, counters, update)": (
        "select count(*) from jobs.ack_many_v1('w', %s::uuid[], %s::bigint[])"
    ),
    "a bare update (no fence, no counters)": (
        "update jobs.jobs set state = 'done', lease_expires_at = null, finished_at = now(),"
        " updated_at = now() where id = any(%s::uuid[]) and claims = any(%s::bigint[])"
    ),
    "delete from the live table + insert into history": (
        "with moved as (delete from jobs.jobs where id = any(%s::uuid[])"
        " and claims = any(%s::bigint[]) returning *) insert into history select * from moved"
    ),
}
HISTORY = (
    "create table history (like jobs.jobs)",
    "alter table history add primary key (id)",
    "create index on history (queue, finished_at)",
)

Setup = Callable[[psycopg.Connection[tuple[object, ...]]], None]


def scratch(admin: str) -> str:
    name = f"sql_per_job_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"create database {name}")
    return name


def measure(admin: str, setup: Setup, ack: str) -> dict[str, float]:
    """Microseconds a job of enqueue, claim and ack in a fresh database that `setup` changed."""
    name = scratch(admin)
    url = psycopg.conninfo.make_conninfo(admin, dbname=name)
    try:
        durajobs.migrate(url)
        with psycopg.connect(url, autocommit=True) as connection:
            setup(connection)
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
            connection.execute("vacuum analyze jobs.jobs")
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
                connection.execute(ack, (ids, claims))
                acked += time.perf_counter() - began
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"drop database {name} with (force)")
    return {"enqueue": enqueue / JOBS * 1e6, "claim": claim / JOBS * 1e6, "ack": acked / JOBS * 1e6}


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main(admin: str) -> None:
    default_ack = next(iter(ACKS.values()))

    def dropping(indexes: list[str]) -> Setup:
        def setup(connection: psycopg.Connection[tuple[object, ...]]) -> None:
            for index in indexes:
                connection.execute(f"drop index jobs.{index}")

        return setup

    def with_history(connection: psycopg.Connection[tuple[object, ...]]) -> None:
        for statement in HISTORY:
            connection.execute(statement)

    by_index: dict[str, list[dict[str, float]]] = {name: [] for name in DROPPED}
    by_ack: dict[str, list[dict[str, float]]] = {name: [] for name in ACKS}
    for _round in range(ROUNDS):
        for name, indexes in DROPPED.items():
            by_index[name].append(measure(admin, dropping(indexes), default_ack))
        for name, ack in ACKS.items():
            by_ack[name].append(measure(admin, with_history, ack))
    print("| variant | enqueue us/job | claim us/job | ack us/job | sum |")
    print("|---|---|---|---|---|")
    for name, runs in by_index.items():
        m = medians(runs)
        total = sum(m.values())
        print(f"| {name} | {m['enqueue']:.1f} | {m['claim']:.1f} | {m['ack']:.1f} | {total:.1f} |")
    print()
    print("| ack as | claim us/job | ack us/job |")
    print("|---|---|---|")
    for name, runs in by_ack.items():
        m = medians(runs)
        print(f"| {name} | {m['claim']:.1f} | {m['ack']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
