"""The Node reference client (clients/node) and the Python worker share one queue: a Node worker
process and a `durajobs worker` process serve it together, and every job runs exactly once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

import durajobs
from support.paths import REPOSITORY, TESTS

NODE = shutil.which("node")
NODE_CLIENT = REPOSITORY / "clients" / "node"
SHARED_WORKER = NODE_CLIENT / "test" / "fixtures" / "shared-worker.js"
SHARED_APP = "support.apps.shared_queue:registry"
QUEUE = "shared"
JOB = "shared-effect"
JOBS = 200

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not on PATH (scripts/setup --test installs it)"
)


def _one(database_url: str, query: str, params=()):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query, params).fetchone()


def _wait_for(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
        raise


def test_a_node_and_a_python_worker_share_a_queue_and_run_each_job_once(database_url, tmp_path):
    assert NODE is not None
    assert (NODE_CLIENT / "node_modules" / "pg").is_dir(), (
        "clients/node has no node_modules: run scripts/setup --test (npm ci --prefix clients/node)"
    )
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "create table node_effects (job_id uuid primary key, by text not null,"
            " at timestamptz not null default clock_timestamp())"
        )
    environment = {**os.environ, "DATABASE_URL": database_url}
    logs: dict[str, Path] = {"node": tmp_path / "node.log", "python": tmp_path / "python.log"}
    with logs["node"].open("wb") as node_log, logs["python"].open("wb") as python_log:
        workers = {
            "node": subprocess.Popen(
                [NODE, str(SHARED_WORKER)],
                cwd=NODE_CLIENT,
                env=environment,
                stdout=node_log,
                stderr=subprocess.STDOUT,
            ),
            "python": subprocess.Popen(
                [sys.executable, "-m", "durajobs.cli", "worker", "--app", SHARED_APP],
                cwd=TESTS,
                env=environment,
                stdout=python_log,
                stderr=subprocess.STDOUT,
            ),
        }
        try:
            # both serve the queue before the first job lands, so both get a share
            _wait_for(
                lambda: _one(database_url, "select count(*) from jobs.workers_live()") == (2,),
                timeout=60,
                what="both workers to announce themselves",
            )
            with durajobs.Client.connect(database_url) as client:
                client.enqueue_many(
                    [
                        {"name": JOB, "input": {"key": f"s{n}"}, "idempotency_key": f"s{n}"}
                        | {"queue": QUEUE}
                        for n in range(JOBS)
                    ]
                )
            _wait_for(
                lambda: (
                    _one(database_url, "select count(*) from jobs.jobs where state <> 'done'")
                    == (0,)
                ),
                timeout=120,
                what="the backlog to drain",
            )
        finally:
            codes = {side: _stop(process) for side, process in workers.items()}
    output = {side: path.read_text(errors="replace") for side, path in logs.items()}
    assert codes == {"node": 0, "python": 0}, output

    summary = _one(
        database_url,
        "select count(*), count(e.job_id), count(*) filter (where j.state = 'done'),"
        " max(j.attempt), max(j.claims)"
        " from jobs.jobs j left join node_effects e on e.job_id = j.id",
    )
    # every job done, one effect each, from one claim and one attempt: none ran twice
    assert summary == (JOBS, JOBS, JOBS, 1, 1), output
    assert _one(database_url, "select count(*) from node_effects") == (JOBS,)
    # the effect's runtime is the claimant's: the Node worker's ids start with 'node:'
    assert _one(
        database_url,
        "select count(*) from jobs.jobs j join node_effects e on e.job_id = j.id"
        " where (e.by = 'node') <> (j.claimed_by like 'node:%%')",
    ) == (0,)
    with psycopg.connect(database_url, autocommit=True) as connection:
        ran = connection.execute("select by, count(*) from node_effects group by by").fetchall()
    by = dict(ran)
    assert by.get("node", 0) >= 1, by
    assert by.get("python", 0) >= 1, by
    for side, text in output.items():
        # a second run of a job would fail its insert on the primary key
        assert "duplicate key" not in text, (side, text)
        assert "UniqueViolation" not in text, (side, text)
    assert _one(database_url, "select count(*) from jobs.workers") == (0,), "a worker kept its row"
