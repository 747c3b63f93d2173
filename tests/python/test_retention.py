"""Retention against a real Postgres: jobs.purge from two sessions at once (R73), Client.purge,
`durajobs jobs purge`, and the scheduler leader's hourly sweep (R70). What each window keeps and
deletes, row by row, is pgTAP's 190_purge."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._values.durations import DeclarationInvalid
from durajobs._values.records import PurgeResult
from durajobs._values.states import StepStatus
from durajobs.cli import main
from durajobs.client import Client
from durajobs.errors import ArgumentInvalid, ConfigInvalid
from durajobs.services.retention import Retention, RetentionSweep
from durajobs.services.scheduler import Scheduler


def _rows(database_url, query, params=()):
    with psycopg.connect(database_url, autocommit=True) as connection:
        cursor = connection.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _done(client, key, *, run_id=None, step=True, queue="q-ret"):
    """A job run to done on `queue` (a step recorded first unless step=False); its id."""
    enqueued = client.enqueue("ret", {"key": key}, key, queue=queue, run_id=run_id)
    [claimed] = client.claim([queue], "w-ret", batch_size=1)
    assert claimed.id == enqueued.id
    if step:
        client.record_step(claimed.id, "w-ret", claimed.claim, "s1", StepStatus.COMPLETED)
    assert client.ack(claimed.id, "w-ret", claimed.claim)
    return enqueued.id


def _age(database_url, days):
    """Every finished job finished `days` ago, every published outbox row published then."""
    _rows(
        database_url,
        "update jobs.jobs set finished_at = now() - make_interval(days => %s)"
        " where finished_at is not null",
        (days,),
    )
    _rows(
        database_url,
        "update jobs.outbox set published_at = now() - make_interval(days => %s)"
        " where published_at is not null",
        (days,),
    )


# -- two sessions at once (R73) --------------------------------------------------------------


def test_two_purges_splitting_a_run_leave_none_of_its_steps(database_url):
    # each call takes one row of the run (batch 1, skip locked); without serialising them, each
    # saw the other's row still standing and kept the run's steps: orphans nobody deletes
    with Client.connect(database_url) as client:
        first = _done(client, "split-1")
        run_id = _rows(database_url, "select run_id from jobs.jobs where id = %s", (first,))[0][0]
        _done(client, "split-2", run_id=run_id, step=False)
    _age(database_url, 20)
    assert _rows(database_url, "select count(*) from jobs.steps") == [(1,)]

    holder = psycopg.connect(database_url)  # a transaction left open
    second_answer: list[tuple[int, int]] = []
    try:
        taken = holder.execute("select jobs, steps from jobs.purge(batch_size => 1)").fetchone()
        assert taken == (1, 0), "the first call takes one row; the run's other row stands"

        def second() -> None:
            with psycopg.connect(database_url, autocommit=True) as connection:
                row = connection.execute(
                    "select jobs, steps from jobs.purge(batch_size => 1)"
                ).fetchone()
                assert row is not None
                second_answer.append(row)

        racer = threading.Thread(target=second)
        racer.start()
        time.sleep(0.5)
        assert racer.is_alive(), "a second purge waits for the first to end"
        holder.commit()
        racer.join(10)
    finally:
        holder.close()
    assert second_answer == [(1, 1)], "it then sees the run's last row go, and its step with it"
    assert _rows(database_url, "select count(*) from jobs.jobs") == [(0,)]
    assert _rows(database_url, "select count(*) from jobs.steps") == [(0,)]


# -- Client.purge and Retention ----------------------------------------------------------------


def test_client_purge_deletes_by_the_windows_given(database_url):
    with Client.connect(database_url) as client:
        old = _done(client, "old")
        _age(database_url, 3)
        recent = _done(client, "recent")
        assert client.purge() == PurgeResult(0, 0, 0, 0), "3 days is within the default 14"
        answer = client.run(Retention.of(done_after="2d").call())
    assert answer == PurgeResult(1, 1, 0, 0)
    assert _rows(database_url, "select id from jobs.jobs") == [(recent,)]
    assert old != recent


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"done_after": "0d"}, DeclarationInvalid),
        ({"ended_after": "-1h"}, DeclarationInvalid),
        ({"published_after": "soon"}, DeclarationInvalid),
        ({"batch_size": 0}, ConfigInvalid),
        ({"batch_size": 10001}, ConfigInvalid),
        ({"batch_size": True}, ConfigInvalid),
        ({"max_batches": 0}, ConfigInvalid),
        ({"every": 0}, DeclarationInvalid),
    ],
)
def test_a_retention_that_cannot_work_is_refused(options, error):
    with pytest.raises(error) as refused:
        Retention.of(**options)
    assert refused.value.code in {"X_JOB_DECLARATION_INVALID", "X_CONFIG_INVALID"}
    assert next(iter(options)) in str(refused.value)


def test_the_sql_refusal_reaches_python_with_its_code(database_url):
    with Client.connect(database_url) as client, pytest.raises(ArgumentInvalid) as refused:
        client.run(calls.purge(batch_size=0))
    assert refused.value.code == "X_ARGUMENT_INVALID"
    assert "batch_size" in str(refused.value)


# -- the command -------------------------------------------------------------------------------


def _command(database_url, capsys, *args):
    status = main(["jobs", "purge", *args, "--database-url", database_url])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_command_purges_until_done_in_batches(database_url, capsys):
    with Client.connect(database_url) as client:
        for n in range(5):
            _done(client, f"cmd-{n}", step=False)
    _age(database_url, 15)
    status, out, err = _command(database_url, capsys, "--purge-batch", "2", "--json")
    assert status == 0, err
    assert out.strip() == (
        '{"jobs": 2, "steps": 0, "outbox": 0, "events": 0, "calls": 1, "more": true}'
    )
    status, out, _ = _command(database_url, capsys, "--purge-batch", "2", "--until-done")
    assert status == 0
    assert out.strip() == (
        "purged 3 job(s), 0 step(s), 0 outbox row(s) and 0 event(s) in 2 call(s)"
    )
    assert _rows(database_url, "select count(*) from jobs.jobs") == [(0,)]


def test_the_command_refuses_a_window_naming_its_option(database_url, capsys):
    with Client.connect(database_url) as client:
        _done(client, "kept", step=False)
    _age(database_url, 400)
    status, out, err = _command(database_url, capsys, "--keep-ended", "forever")
    assert (status, out) == (1, "")
    assert "error: X_JOB_DECLARATION_INVALID: --keep-ended" in err
    assert "\nfix: " in err
    status, out, err = _command(database_url, capsys, "--purge-batch", "0")
    assert (status, out) == (1, "")
    assert "error: X_ARGUMENT_INVALID: --purge-batch" in err
    assert _rows(database_url, "select count(*) from jobs.jobs") == [(1,)], "nothing was deleted"


# -- the scheduler leader's sweep (R70) --------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = datetime.now(UTC)

    def __call__(self):
        return self.now


def _scheduler(database_url, **options):
    registry = durajobs.Registry(database_url=database_url)
    return Scheduler(registry, database_url, holder="ret", clock=Clock(), **options)


async def _lead_rounds(scheduler, rounds, *, after_each=lambda: None):
    """Run `rounds` of the scheduler a minute of its clock apart: a maintenance each."""
    await scheduler.db.open()
    try:
        for _ in range(rounds):
            await scheduler.tick_once()
            after_each()
            scheduler.clock.now += timedelta(minutes=1)
    finally:
        await scheduler.db.close()


def test_the_leader_purges_by_default_and_not_with_retention_none(database_url):
    with Client.connect(database_url) as client:
        _done(client, "sched-old")
        client.publish_event("ev", {}, ttl=timedelta(seconds=1))
    _age(database_url, 15)
    # an outbox row published 8 days ago
    _rows(
        database_url,
        "select jobs.outbox_relay('r') from jobs.outbox_stage(name => 'ob', input => '{}',"
        " idempotency_key => 'ob-1', queue => 'q-ob')",
    )
    _rows(database_url, "update jobs.outbox set published_at = now() - interval '8 days'")
    time.sleep(1.1)  # the event expires

    asyncio.run(_lead_rounds(_scheduler(database_url, retention=None), 2))
    assert _rows(database_url, "select count(*) from jobs.jobs where state = 'done'") == [(1,)]

    asyncio.run(_lead_rounds(_scheduler(database_url), 1))
    assert _rows(
        database_url,
        "select (select count(*) from jobs.jobs where state = 'done'),"
        " (select count(*) from jobs.steps), (select count(*) from jobs.outbox),"
        " (select count(*) from jobs.events)",
    ) == [(0, 0, 0, 0)], "the done job, its step, the published outbox row and the event"


def test_a_sweep_left_behind_goes_on_at_the_next_minute_then_waits_an_hour(database_url):
    with Client.connect(database_url) as client:
        for n in range(5):
            _done(client, f"behind-{n}", step=False)
    _age(database_url, 15)
    retention = Retention.of(batch_size=1, max_batches=2)
    sweep = RetentionSweep(retention)
    scheduler = _scheduler(database_url, retention=None, maintenance=[sweep])
    left = []

    def count_left():
        left.append(_rows(database_url, "select count(*) from jobs.jobs")[0][0])

    asyncio.run(_lead_rounds(scheduler, 4, after_each=count_left))
    # 2 a round while behind; the round that found the last one leaves a full hour to the next
    assert left == [3, 1, 0, 0]
    with Client.connect(database_url) as client:
        _done(client, "after", step=False)
    _age(database_url, 15)
    asyncio.run(_lead_rounds(scheduler, 2))
    assert _rows(database_url, "select count(*) from jobs.jobs") == [(1,)], "not before the hour"
