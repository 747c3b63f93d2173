"""A parent of 100 children across two real worker processes: SIGKILL the first while the
parent is parked and its children half done, and the second finishes them; no child is enqueued
twice, each ends done once, and the parent resumes once, with the total of all 100 results."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg

import durajobs
from support.apps import CHILDREN_APP
from support.paths import TESTS
from support.rows import fetch_all
from support.waiting import wait_until

COUNT = 100


def _worker(database_url: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "DATABASE_URL": database_url, "CHILD_SECONDS": "0.04"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "worker",
            "--app",
            CHILDREN_APP,
            "--concurrency",
            "2",
            "--visibility",
            "1",
        ],
        cwd=TESTS,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _children_by_state(database_url: str, parent_id: object) -> dict[str, int]:
    rows = fetch_all(
        database_url,
        "select state, count(*) from jobs.jobs where parent_id = %s group by state",
        [parent_id],
    )
    return {state: int(count) for state, count in rows}


def _parked_mid_run(database_url: str, parent_id: object) -> bool:
    children = _children_by_state(database_url, parent_id)
    return (
        _state(database_url, parent_id) == "suspended"
        and children.get("done", 0) >= 10
        and children.get("running", 0) >= 1
    )


def _state(database_url: str, id: object) -> str:
    [(state,)] = fetch_all(database_url, "select state from jobs.jobs where id = %s", [id])
    return str(state)


def test_a_killed_worker_leaves_the_parent_to_resume_once_on_another(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table children_after (job_id uuid, total bigint)")
    with durajobs.Client.connect(database_url) as client:
        parent = client.enqueue("children.fan", {"count": COUNT}, "fan", max_attempts=5)

    first = _worker(database_url)
    try:
        wait_until(
            lambda: _parked_mid_run(database_url, parent.id),
            timeout=60,
            every=0.02,
            what="the parent parked, with ten children done and some running",
        )
        first.send_signal(signal.SIGKILL)  # no drain, no settle: children mid-run
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    at_the_kill = _children_by_state(database_url, parent.id)
    assert sum(at_the_kill.values()) == COUNT
    assert at_the_kill.get("done", 0) < COUNT, "the kill landed before every child was done"
    assert _state(database_url, parent.id) == "suspended"

    second = _worker(database_url)
    try:
        wait_until(
            lambda: _state(database_url, parent.id) == "done",
            timeout=60,
            every=0.1,
            what="the parent to resume on the second worker and finish",
        )
    finally:
        if second.poll() is None:
            second.send_signal(signal.SIGTERM)
        out, _ = second.communicate(timeout=60)

    # the children A held when it died were taken again once their leases lapsed
    [(taken_again,)] = fetch_all(
        database_url,
        "select count(*) from jobs.jobs where parent_id = %s and claims > 1",
        [parent.id],
    )
    assert taken_again >= at_the_kill.get("running", 0)
    # every child enqueued once (each had a key of its own: no dedupe hid a second enqueue)
    assert fetch_all(
        database_url,
        "select count(*), count(distinct id), count(distinct input ->> 'n'),"
        " count(distinct idempotency_key) from jobs.jobs where parent_id = %s",
        [parent.id],
    ) == [(COUNT, COUNT, COUNT, COUNT)]
    # each ended done, once, with its own result
    assert fetch_all(
        database_url,
        "select count(*), count(distinct id), count(*) filter (where state = 'done'"
        " and result = input -> 'n') from jobs.jobs_history where parent_id = %s",
        [parent.id],
    ) == [(COUNT, COUNT, COUNT)]
    assert fetch_all(
        database_url, "select count(*) from jobs.jobs_live where parent_id = %s", [parent.id]
    ) == [(0,)]
    # the parent resumed once: the code after its wait ran once, with every child's result
    total = sum(range(COUNT))
    assert fetch_all(database_url, "select job_id, total from children_after") == [
        (parent.id, total)
    ], out
    assert fetch_all(
        database_url, "select state, result, attempt from jobs.jobs where id = %s", [parent.id]
    ) == [("done", total, 1)]
    # its steps: one enqueue per child, and the wait
    assert fetch_all(
        database_url,
        "select count(*) filter (where name like 'enqueue:%%'),"
        " count(*) filter (where name like 'wait_for:%%'), bool_and(status = 'completed')"
        " from jobs.steps where run_id = %s",
        [parent.run_id],
    ) == [(COUNT, 1, True)]
