"""The outbox relay SIGKILLed again and again while it publishes from an application's database
into the queue's (two databases: a pass publishes, then marks, so a kill can land between the
two): every staged job reaches the queue once and runs once."""

from __future__ import annotations

import random
import time

import psycopg
from kit import Process, query, unfinished, value, wait_for, worker


def _stage(url: str, keys: list[str]) -> None:
    """Stage one outbox row per key, each in its own committed transaction, as an app would."""
    with psycopg.connect(url, autocommit=True) as connection:
        for key in keys:
            connection.execute(
                "select jobs.outbox_stage('tick', %s::jsonb, %s)",
                [psycopg.types.json.Jsonb({"key": key, "ms": 0}), key],
            )


def _published(url: str) -> int:
    return int(value(url, "select count(*) from jobs.outbox where published_at is not null"))


def test_a_relay_sigkilled_round_after_round_publishes_each_job_once(
    db, second_db, strength, tmp_path
):
    rows, kills = strength.pick(400, 1_500), strength.pick(5, 15)
    keys = [f"o{n:05}" for n in range(rows)]
    app_url, queue_url = second_db.url, db.url  # the effects table is in the queue's database
    _stage(app_url, keys)
    chance = random.Random(7)

    def relay(log: str) -> Process:
        # passes of one row, back to back: a kill lands inside some pass (between a publish
        # and its mark or not), and each relay publishes a part of the rows before it dies
        arguments = ["relay", "--source-url", app_url, "--batch-size", "1", "--claim-lease", "1s"]
        return Process(arguments, queue_url, tmp_path / log)

    for round_ in range(kills):
        before = _published(app_url)
        process = relay(f"killed-{round_}.log")
        wait_for(
            lambda before=before: _published(app_url) > before,
            timeout=60,
            what="the relay to publish",
            show=[process],
        )
        time.sleep(chance.uniform(0.0, 0.05))
        process.kill()
    assert _published(app_url) < rows, "everything was published before the last kill"

    last = relay("last.log")
    running = worker(queue_url, tmp_path / "worker.log")
    try:
        wait_for(
            lambda: _published(app_url) == rows and unfinished(queue_url) == 0,
            timeout=120,
            what="every staged job published and run",
            show=[last, running],
        )
    finally:
        assert last.stop() == 0, last.tail()
        assert running.stop() == 0, running.tail()
    published = query(
        queue_url,
        "select j.idempotency_key, count(*) from jobs.jobs j group by j.idempotency_key",
    )
    assert sorted(key for key, _ in published) == keys, "a staged job never reached the queue"
    assert all(count == 1 for _, count in published), "a staged job reached the queue twice"
    ran = query(queue_url, "select run_id from effects group by run_id having count(*) > 1")
    assert ran == [], "a relayed job ran twice"
    assert value(queue_url, "select count(distinct run_id) from effects") == rows
