"""Worker processes killed and drained mid-step, round after round: nothing is lost, and a step
whose checkpoint was stored never runs again."""

from __future__ import annotations

import random
import signal
import time

from kit import enqueue, query, unfinished, value, wait_for, worker


def _effects(url: str) -> int:
    return int(value(url, "select count(*) from effects"))


def _stored_steps_run_again(url: str) -> list[tuple[object, ...]]:
    """Each effect of a step written after that step's checkpoint was stored."""
    return query(
        url,
        "select e.run_id, e.what, e.attempt, e.at, s.finished_at"
        "  from effects e"
        "  join jobs.jobs j on j.run_id::text = e.run_id"
        "  join jobs.steps s on s.run_id = j.run_id and s.name = e.what"
        " where e.at > s.finished_at",
    )


def _assert_every_step_of_every_job_done(url: str, jobs: int) -> None:
    assert unfinished(url) == 0
    assert value(url, "select count(*) from jobs.jobs where state = 'done'") == jobs
    stored = value(url, "select count(*) from jobs.steps where status = 'completed'")
    assert stored == jobs * 3
    never_ran = value(
        url,
        "select count(*) from jobs.steps s join jobs.jobs j on j.run_id = s.run_id"
        " where not exists (select 1 from effects e"
        "                    where e.run_id = j.run_id::text and e.what = s.name)",
    )
    assert never_ran == 0


def test_a_worker_sigkilled_mid_step_round_after_round_loses_nothing(db, strength, tmp_path):
    jobs, kills = strength.pick(16, 48), strength.pick(4, 20)
    enqueue(db.url, "stepped", [f"s{n}" for n in range(jobs)], ms=150)
    chance = random.Random(24)
    shown = []
    for round_ in range(kills):
        before = _effects(db.url)
        process = worker(db.url, tmp_path / f"killed-{round_}.log", visibility=1, in_flight=4)
        shown.append(process)
        wait_for(
            lambda before=before: _effects(db.url) > before,
            timeout=60,
            what="the worker to run a step",
            show=[process],
        )
        time.sleep(chance.uniform(0.05, 0.4))  # somewhere inside a step, or between two
        process.kill()  # SIGKILL: no drain, no settle; the leases are all that is left
    assert unfinished(db.url) > 0, "the backlog ran out before the last kill: raise the work"

    survivor = worker(db.url, tmp_path / "survivor.log", visibility=1, in_flight=4)
    try:
        wait_for(lambda: unfinished(db.url) == 0, timeout=120, what="the backlog", show=[survivor])
    finally:
        assert survivor.stop() == 0, survivor.tail()
    _assert_every_step_of_every_job_done(db.url, jobs)
    assert _stored_steps_run_again(db.url) == []
    # the kills landed mid-run: some jobs needed another attempt
    assert value(db.url, "select max(attempt) from jobs.jobs") > 1


def test_a_worker_drained_mid_step_round_after_round_spends_no_attempt(db, strength, tmp_path):
    jobs, drains = strength.pick(12, 40), strength.pick(3, 10)
    # one attempt each: a drain that counted its hand-back would leave them dead
    enqueue(db.url, "stepped-once", [f"d{n}" for n in range(jobs)], ms=200)
    for round_ in range(drains):
        before = _effects(db.url)
        process = worker(db.url, tmp_path / f"drained-{round_}.log", visibility=2, in_flight=4)
        wait_for(
            lambda before=before: _effects(db.url) > before,
            timeout=60,
            what="the worker to run a step",
            show=[process],
        )
        time.sleep(0.1)
        process.signal(signal.SIGTERM)
        status = process.popen.wait(timeout=60)
        assert status == 0, process.tail()
        assert "jobs.attempt.interrupted" in process.log.read_text(), process.tail()
    assert unfinished(db.url) > 0, "the backlog ran out before the last drain: raise the work"

    last = worker(db.url, tmp_path / "last.log", visibility=2, in_flight=4)
    try:
        wait_for(lambda: unfinished(db.url) == 0, timeout=120, what="the backlog", show=[last])
    finally:
        assert last.stop() == 0, last.tail()
    _assert_every_step_of_every_job_done(db.url, jobs)
    assert _stored_steps_run_again(db.url) == []
    assert value(db.url, "select max(attempt) from jobs.jobs") == 1
    # the drains landed mid-run: some runs were finished by a later process than began them
    assert (
        value(
            db.url,
            "select count(distinct run_id) filter (where pids > 1) from"
            " (select run_id, count(distinct pid) as pids from effects group by run_id) r",
        )
        > 0
    )


def test_a_worker_killed_inside_on_settled_never_calls_it_again(db, strength, tmp_path):
    """M159: the hook is told at most once per ending. A worker SIGKILLed inside it, after the
    ack landed, leaves the job done; no later worker runs the body or the hook again."""
    jobs = strength.pick(3, 6)
    enqueue(db.url, "hooked", [f"h{n}" for n in range(jobs)])
    killed = worker(db.url, tmp_path / "killed.log", visibility=1, in_flight=jobs)
    wait_for(
        lambda: value(db.url, "select count(*) from effects where what = 'hook'") == jobs,
        timeout=60,
        what="every job's hook to start",
        show=[killed],
    )
    killed.kill()  # inside every hook: each ack landed before its hook was called
    assert value(db.url, "select count(*) from jobs.jobs where state = 'done'") == jobs
    after = worker(db.url, tmp_path / "after.log", visibility=1, in_flight=jobs)
    time.sleep(3)  # past the killed worker's leases (1 s): anything owed would run by now
    after.kill()
    assert value(db.url, "select count(*) from effects where what = 'ran'") == jobs
    assert value(db.url, "select count(*) from effects where what = 'hook'") == jobs
    assert value(db.url, "select count(*) from jobs.jobs where state = 'done'") == jobs
