"""The minimal loop the SQL-level benchmarks share (horizon.py, stale_stats.py): a fresh schema,
no-op jobs enqueued a thousand a call, and a drain by durajobs' own claim and ack from one
session, as a worker's connection would make them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

ACK = "select count(*) from jobs.ack_many_v1('w1', %s::uuid[], %s::bigint[])"
DURAJOBS = str(Path(sys.executable).with_name("durajobs"))
Connection = psycopg.Connection[Any]


def fresh_schema(url: str) -> None:
    """Drop the schema `jobs` at `url` and install it again with `durajobs migrate`."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("drop schema if exists jobs cascade")
        connection.execute("drop table if exists public.alembic_version")
    subprocess.run([DURAJOBS, "migrate", "--database-url", url], check=True, capture_output=True)


def enqueue(connection: Connection, tag: str, jobs: int) -> None:
    """`jobs` no-op jobs on queue bench, keyed `tag.n`."""
    for start in range(0, jobs, 1000):
        rows = [
            {"name": "noop", "queue": "bench", "input": {}, "idempotency_key": f"{tag}.{n}"}
            for n in range(start, min(start + 1000, jobs))
        ]
        connection.execute("select count(*) from jobs.enqueue_many(%s::jsonb)", [json.dumps(rows)])


def drain(connection: Connection, claim: str, batch: int) -> int:
    """Claim (`claim` takes the batch size) and ack until a claim comes back empty; answers the
    jobs drained."""
    done = 0
    while True:
        rows = connection.execute(claim, [batch]).fetchall()
        if not rows:
            return done
        connection.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows]])
        done += len(rows)
