"""Real worker processes: SIGKILL mid-run, SIGTERM mid-run, two workers sharing a backlog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

import durajobs
from support.apps import SAMPLE_APP
from support.paths import TESTS


def _worker(database_url: str, *extra: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "worker",
            "--app",
            SAMPLE_APP,
            "--visibility",
            "1",
            *extra,
        ],
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


def _effects(database_url: str, what: str) -> int:
    try:
        return _one(database_url, "select count(*) from effects where what = %s", [what])[0]
    except psycopg.errors.UndefinedTable:
        return 0


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    return output


@pytest.fixture
def app_client(database_url):
    with durajobs.Client.connect(database_url) as client:
        yield client


def test_a_killed_worker_job_is_redelivered_and_its_steps_do_not_run_again(
    database_url, app_client
):
    job = app_client.enqueue("two-steps", {"key": "k", "seconds": 60}, "k", max_attempts=5)
    first = _worker(database_url)
    try:
        # killed once step one is stored, not merely run: a kill between its effect and its
        # checkpoint leaves a step that never completed, which a retry rightly runs again
        _wait_for(
            lambda: (
                _one(
                    database_url,
                    "select count(*) from jobs.steps"
                    " where run_id = %s and name = 'first' and status = 'completed'",
                    [job.run_id],
                )
                == (1,)
            ),
            timeout=30,
            what="step one stored",
        )
        first.kill()  # SIGKILL: no drain, no settle, the lease is all that is left
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    assert _one(database_url, "select state from jobs.jobs where id = %s", [job.id]) == ("running",)

    second = _worker(database_url)
    try:
        _wait_for(
            lambda: (
                _one(database_url, "select state from jobs.jobs where id = %s", [job.id])
                == ("done",)
            ),
            timeout=30,
            what="the redelivered run to finish",
        )
    finally:
        _stop(second)
    assert _effects(database_url, "first") == 1, "a completed step ran again"
    assert _effects(database_url, "second") == 1
    assert _one(database_url, "select attempt from jobs.jobs where id = %s", [job.id]) == (2,)


def test_sigterm_interrupts_the_run_uncounted_and_another_worker_finishes_it(
    database_url, app_client
):
    job = app_client.enqueue("two-steps", {"key": "k", "seconds": 60}, "k", max_attempts=1)
    first = _worker(database_url)
    # step one's record, not only its effect: drained between the two, the run would run step
    # one again and wait its 60 s (the failure a loaded CI box once showed)
    _wait_for(
        lambda: (
            _one(
                database_url,
                "select count(*) from jobs.steps where run_id = %s and name = 'first'"
                " and status = 'completed'",
                [job.run_id],
            )
            == (1,)
        ),
        timeout=30,
        what="step one's record",
    )
    started = time.monotonic()
    output = _stop(first)
    assert time.monotonic() - started < 20, "the drain waited for the body instead of cancelling"
    assert first.returncode == 0
    assert "jobs.attempt.interrupted" in output
    # max_attempts=1 survives the deploy: the attempt was given back
    assert _one(database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]) == (
        "ready",
        0,
    )

    second = _worker(database_url)
    try:
        _wait_for(
            lambda: (
                _one(database_url, "select state from jobs.jobs where id = %s", [job.id])
                == ("done",)
            ),
            timeout=30,
            what="the interrupted run to finish",
        )
    except AssertionError as timed_out:
        # what the second worker and the row said, for a failure seen once on a loaded CI box
        row = _one(
            database_url,
            "select state, attempt, run_at, claimed_by, last_error from jobs.jobs where id = %s",
            [job.id],
        )
        raise AssertionError(f"{timed_out}; row {row}; second worker:\n{_stop(second)}") from None
    finally:
        _stop(second)
    assert _effects(database_url, "first") == 1
    assert _effects(database_url, "second") == 1


def test_two_worker_processes_complete_ten_thousand_jobs_exactly_once(database_url, app_client):
    for start in range(0, 10_000, 2_500):
        app_client.enqueue_many(
            [
                {"name": "noop", "input": {"key": f"n{n}"}, "idempotency_key": f"n{n}"}
                for n in range(start, start + 2_500)
            ]
        )
    workers = [_worker(database_url), _worker(database_url)]
    try:
        _wait_for(
            lambda: (
                _one(database_url, "select count(*) from jobs.jobs where state <> 'done'") == (0,)
            ),
            timeout=300,
            what="the backlog to drain",
        )
    finally:
        outputs = [_stop(worker) for worker in workers]
    summary = _one(
        database_url,
        "select count(*), max(attempt), max(claims), count(distinct claimed_by) from jobs.jobs",
    )
    # one claim and one attempt per job: none ran twice; both processes took part
    assert summary == (10_000, 1, 1, 2), outputs


def test_the_worker_command_serves_only_the_queues_it_is_given(database_url, app_client):
    app_client.enqueue("noop", {"key": "mine"}, "mine", queue="mine")
    app_client.enqueue("noop", {"key": "theirs"}, "theirs", queue="theirs")
    worker = _worker(database_url, "--queues", "mine", "--max-in-flight", "1")
    try:
        _wait_for(
            lambda: (
                _one(database_url, "select state from jobs.jobs where queue = 'mine'") == ("done",)
            ),
            timeout=30,
            what="the job on the served queue",
        )
    finally:
        output = _stop(worker)
    assert _one(database_url, "select state from jobs.jobs where queue = 'theirs'") == ("ready",)
    assert "jobs.worker.started" in output


def test_the_worker_command_refuses_a_bad_cap_with_its_code(database_url):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "worker",
            "--app",
            SAMPLE_APP,
            "--max-in-flight",
            "0",
        ],
        cwd=TESTS,
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "X_CONFIG_INVALID" in done.stderr


def test_sigint_drains_like_sigterm(database_url, app_client):
    job = app_client.enqueue("two-steps", {"key": "k", "seconds": 60}, "k", max_attempts=1)
    worker = _worker(database_url)
    _wait_for(lambda: _effects(database_url, "first") == 1, timeout=30, what="step one")
    worker.send_signal(signal.SIGINT)
    output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert "jobs.attempt.interrupted" in output
    assert _one(database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]) == (
        "ready",
        0,
    )


def test_a_body_abandoned_at_the_drain_deadline_does_not_hold_the_process(database_url, app_client):
    app_client.enqueue("stubborn", {"key": "k", "seconds": 30}, "k")
    worker = _worker(database_url, "--drain-deadline", "0.5")
    _wait_for(lambda: _effects(database_url, "started") == 1, timeout=30, what="the body")
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    output, _ = worker.communicate(timeout=60)
    assert time.monotonic() - started < 10, "the abandoned thread kept the process alive"
    assert worker.returncode == 0
    assert "jobs.worker.drain-abandoned" in output


def test_the_scheduler_command_fires_tasks_and_resigns_on_sigterm(database_url):
    environment = {**os.environ, "DATABASE_URL": database_url}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "durajobs.cli", "scheduler", "--app", SAMPLE_APP],
        cwd=TESTS,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(
            lambda: (
                _one(
                    database_url,
                    "select count(*) from jobs.jobs"
                    " where idempotency_key like 'every-two-seconds@%%'",
                )[0]
                >= 2
            ),
            timeout=30,
            what="two fires",
        )
    finally:
        output = _stop(scheduler)
    assert scheduler.returncode == 0, output
    assert "jobs.scheduler.leading" in output
    # a clean stop gives the lease up, so a standby takes over at once
    assert _one(database_url, "select count(*) from jobs.scheduler_leases") == (0,)


def test_a_worker_with_the_scheduler_runs_what_it_fires(database_url):
    worker = _worker(database_url, "--with-scheduler")
    try:
        _wait_for(
            lambda: (
                _one(
                    database_url,
                    "select count(*) from jobs.jobs where state = 'done'"
                    " and idempotency_key like 'every-two-seconds@%%'",
                )[0]
                >= 1
            ),
            timeout=30,
            what="a fired job to run",
        )
    finally:
        output = _stop(worker)
    assert worker.returncode == 0, output


def _live_workers(database_url: str) -> list[tuple[str, int]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute("select id, pid from jobs.workers_live()").fetchall()


def test_a_killed_worker_leaves_the_registry_one_visibility_after_its_last_heartbeat(
    database_url,
):
    process = _worker(database_url)  # --visibility 1: the row's TTL is one second
    try:
        _wait_for(lambda: bool(_live_workers(database_url)), timeout=30, what="the registry row")
        [(worker_id, pid)] = _live_workers(database_url)
        assert pid == process.pid
        process.kill()  # SIGKILL: nothing forgets the row
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    (expires_at,) = _one(
        database_url, "select expires_at from jobs.workers where id = %s", [worker_id]
    )
    assert expires_at is not None, "the killed worker's row is still stored"
    _wait_for(
        lambda: _live_workers(database_url) == [],
        timeout=10,
        what="the dead worker's row to expire",
    )
    listed_until = _one(database_url, "select now() >= %s", [expires_at])
    assert listed_until == (True,), "the row left the listing before its expiry"


def test_a_worker_that_stops_forgets_its_row_at_once(database_url):
    process = _worker(database_url)
    _wait_for(lambda: bool(_live_workers(database_url)), timeout=30, what="the registry row")
    _stop(process)
    assert _one(database_url, "select count(*) from jobs.workers") == (0,)
