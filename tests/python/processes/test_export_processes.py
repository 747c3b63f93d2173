"""An export in real worker processes: SIGKILL between two pages, and a second worker resumes it
at the page in flight, writing the same bytes (issue 20; items 190, R80)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

import durajobs
from support.apps import EXPORT_APP
from support.paths import TESTS

ROWS = [(i, f"item {i}") for i in range(1, 12)]  # 11 rows: 6 pages of 2


def _worker(database_url: str, root: Path) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "DATABASE_URL": database_url,
        "EXPORT_ROOT": str(root),
        "EXPORT_PAGE_SECONDS": "0.3",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "durajobs.cli", "worker", "--app", EXPORT_APP, "--visibility", "1"],
        cwd=TESTS,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _one(database_url: str, query: str, params=()):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query, params).fetchone()


def _wait_for(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _pages_done(database_url: str, run_id: object) -> int:
    return _one(
        database_url,
        "select count(*) from jobs.steps where run_id = %s and left(name, 5) = 'page-'"
        " and status = 'completed'",
        [run_id],
    )[0]


def test_a_killed_export_resumes_at_its_page_and_writes_the_same_bytes(database_url, tmp_path):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table export_items (id int primary key, name text)")
        connection.execute("create table export_reads (after int)")
        with connection.cursor() as cursor:
            cursor.executemany("insert into export_items values (%s, %s)", ROWS)
    with durajobs.Client.connect(database_url) as client:
        job = client.enqueue("items.export", {"export_id": "k"}, "k", max_attempts=5)

    first = _worker(database_url, tmp_path)
    try:
        _wait_for(lambda: _pages_done(database_url, job.run_id) >= 2, timeout=60, what="two pages")
        first.send_signal(signal.SIGKILL)  # no drain, no settle: mid-export
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    stored = _pages_done(database_url, job.run_id)
    assert 2 <= stored < 6, "the kill landed mid-export"

    second = _worker(database_url, tmp_path)
    try:
        _wait_for(
            lambda: (
                _one(database_url, "select state from jobs.jobs where id = %s", [job.id])
                == ("done",)
            ),
            timeout=60,
            what="the resumed export to finish",
        )
    finally:
        if second.poll() is None:
            second.send_signal(signal.SIGTERM)
        second.communicate(timeout=60)

    parts = sorted((tmp_path / "exports" / "k").glob("part-*.csv"))
    assert [p.name for p in parts] == [f"part-0000{i}.csv" for i in range(6)]
    expected = (
        ["id,name\n1,item 1\n2,item 2\n"]
        + [f"{i},item {i}\n{i + 1},item {i + 1}\n" for i in range(3, 11, 2)]
        + ["11,item 11\n"]
    )
    assert [p.read_bytes().decode() for p in parts] == expected
    manifest = (tmp_path / "exports" / "k" / "manifest.json").read_text()
    assert manifest == '{"columns": ["id", "name"], "format": "csv", "parts": 6, "rows": 11}\n'
    # every page whose step was stored before the kill was read once; only later pages twice
    reads = [row[0] for row in _all(database_url, "select after from export_reads")]
    stored_cursors = [None, *range(2, 2 * stored + 1, 2)][:stored]
    assert all(reads.count(after) == 1 for after in stored_cursors), reads
    assert _one(database_url, "select attempt from jobs.jobs where id = %s", [job.id]) == (2,)


def _all(database_url: str, query: str):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query).fetchall()
