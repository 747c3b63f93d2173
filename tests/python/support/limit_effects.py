"""Worker processes on the limited app (support.apps.limited), and what their handlers' own
start and end rows in `limit_effects` show: how many ran at once, per job and per key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg

from support.apps import LIMITED_APP
from support.paths import TESTS


def worker(database_url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durajobs.cli", "worker", "--app", LIMITED_APP, *extra],
        cwd=TESTS,
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(worker: subprocess.Popen[str]) -> str:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=30)
    return out


def one(database_url: str, query: str, params: object = ()) -> tuple:
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(query, params).fetchone()
    assert row is not None
    return row


def wait_done(database_url: str, names: list[str], count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        (done,) = one(
            database_url,
            "select count(*) from jobs.jobs where name = any(%s) and state = 'done'",
            [names],
        )
        if done >= count:
            return
        assert time.monotonic() < deadline, f"only {done} of {count} jobs done in {timeout} s"
        time.sleep(0.1)


# the most handler runs overlapping at any instant one of them started, per job (and per key)
PEAK = """
select coalesce(max(overlapping), 0)
  from (select (select count(*)
                  from limit_effects o
                 where o.job = e.job
                   and (%(per_key)s is false or o.key = e.key)
                   and o.started <= e.started
                   and coalesce(o.ended, 'infinity') > e.started) as overlapping
          from limit_effects e
         where e.job = %(job)s) peaks
"""


def peak(database_url: str, job: str, *, per_key: bool = False) -> int:
    (peak,) = one(database_url, PEAK, {"job": job, "per_key": per_key})
    return int(peak)


def wait_registered(database_url: str, count: int, timeout: float = 60) -> None:
    """Wait until `count` workers have registered, so work enqueued next reaches all of them."""
    deadline = time.monotonic() + timeout
    while one(database_url, "select count(*) from jobs.workers")[0] < count:
        assert time.monotonic() < deadline, f"fewer than {count} workers started in {timeout} s"
        time.sleep(0.05)
