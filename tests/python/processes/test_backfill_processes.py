"""A backfill in real worker processes: SIGKILL between two pages, and a second worker resumes
the pass at the page in flight; the pages before are not read again and the ledger keeps one
row whose counts are the pass's (issue 20; items 169, 173, R79)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

import durajobs
from support.apps import BACKFILL_APP
from support.paths import TESTS
from support.rows import fetch_all
from support.waiting import wait_until

ROWS = 11  # 6 pages of 2


def _worker(database_url: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "DATABASE_URL": database_url, "BACKFILL_PAGE_SECONDS": "0.3"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "worker",
            "--app",
            BACKFILL_APP,
            "--visibility",
            "1",
        ],
        cwd=TESTS,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _pages_done(database_url: str, run_id: object) -> int:
    ((count,),) = fetch_all(
        database_url,
        "select count(*) from jobs.steps where run_id = %s and left(name, 6) = 'batch:'"
        " and status = 'completed'",
        [run_id],
    )
    return int(count)


def test_a_killed_backfill_resumes_at_its_page(database_url, tmp_path: Path):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table backfill_items (id int primary key, done int default 0)")
        connection.execute("create table backfill_reads (after int)")
        connection.execute("insert into backfill_items (id) select generate_series(1, %s)", [ROWS])
    with durajobs.Client.connect(database_url) as client:
        job = client.enqueue("items.fill", {}, "items.fill", max_attempts=5)

    first = _worker(database_url)
    try:
        wait_until(lambda: _pages_done(database_url, job.run_id) >= 2, timeout=60, what="two pages")
        first.send_signal(signal.SIGKILL)  # no drain, no settle: mid-pass
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    stored = _pages_done(database_url, job.run_id)
    assert 2 <= stored < 6, "the kill landed mid-pass"
    ((started_before,),) = fetch_all(database_url, "select started_at from jobs.backfills")

    second = _worker(database_url)
    try:
        wait_until(
            lambda: (
                fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id])
                == [("done",)]
            ),
            timeout=60,
            what="the resumed pass to finish",
        )
    finally:
        if second.poll() is None:
            second.send_signal(signal.SIGTERM)
        second.communicate(timeout=60)

    # every page whose step was stored before the kill was read once; only later pages twice
    reads = [row[0] for row in fetch_all(database_url, "select after from backfill_reads")]
    stored_cursors = [None, *range(2, 2 * stored + 1, 2)][:stored]
    assert all(reads.count(after) == 1 for after in stored_cursors), reads
    # every row handled; at most the page in flight at the kill twice (at least once)
    done = [
        row[0] for row in fetch_all(database_url, "select done from backfill_items order by id")
    ]
    assert all(count >= 1 for count in done)
    assert sum(done) <= ROWS + 2
    ((run_id, status, batches, rows, started),) = fetch_all(
        database_url,
        "select run_id, status, batches, rows_processed, started_at from jobs.backfills",
    )
    assert (run_id, status, batches, rows) == (job.run_id, "completed", 6, ROWS)
    assert started == started_before
    assert fetch_all(database_url, "select attempt from jobs.jobs where id = %s", [job.id]) == [
        (2,)
    ]
