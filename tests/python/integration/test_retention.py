"""Retention against a real Postgres: Client.purge, `durajobs jobs purge`, and the scheduler
leader's hourly sweep (R70). What each window keeps and deletes, row by row, is pgTAP's
190_purge; jobs.purge from two sessions at once (R73) is concurrency/test_purge_race; a
retention refused before any SQL, unit/test_value_checks."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import durajobs
from durajobs._db import calls
from durajobs._values.records import PurgeResult
from durajobs.cli import main
from durajobs.client import Client
from durajobs.errors import ArgumentInvalid
from durajobs.services.retention import Retention, RetentionSweep
from durajobs.services.scheduler import Scheduler
from support.purging import age_finished, finished_job
from support.rows import fetch_all
from support.scheduling import Clock

# -- Client.purge and Retention ----------------------------------------------------------------


def test_client_purge_deletes_by_the_windows_given(database_url):
    with Client.connect(database_url) as client:
        old = finished_job(client, "old")
        age_finished(database_url, 3)
        recent = finished_job(client, "recent")
        assert client.purge() == PurgeResult(0, 0, 0, 0), "3 days is within the default 14"
        answer = client.run(Retention.of(done_after="2d").call())
    assert answer == PurgeResult(1, 1, 0, 0)
    assert fetch_all(database_url, "select id from jobs.jobs") == [(recent,)]
    assert old != recent


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
            finished_job(client, f"cmd-{n}", step=False)
    age_finished(database_url, 15)
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
    assert fetch_all(database_url, "select count(*) from jobs.jobs") == [(0,)]


def test_the_command_refuses_a_window_naming_its_option(database_url, capsys):
    with Client.connect(database_url) as client:
        finished_job(client, "kept", step=False)
    age_finished(database_url, 400)
    status, out, err = _command(database_url, capsys, "--keep-ended", "forever")
    assert (status, out) == (1, "")
    assert "error: X_JOB_DECLARATION_INVALID: --keep-ended" in err
    assert "\nfix: " in err
    status, out, err = _command(database_url, capsys, "--purge-batch", "0")
    assert (status, out) == (1, "")
    assert "error: X_ARGUMENT_INVALID: --purge-batch" in err
    assert fetch_all(database_url, "select count(*) from jobs.jobs") == [(1,)], (
        "nothing was deleted"
    )


# -- the scheduler leader's sweep (R70) --------------------------------------------------------


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
        finished_job(client, "sched-old")
        client.publish_event("ev", {}, ttl=timedelta(seconds=1))
    age_finished(database_url, 15)
    # an outbox row published 8 days ago
    fetch_all(
        database_url,
        "select jobs.outbox_relay('r') from jobs.outbox_stage(name => 'ob', input => '{}',"
        " idempotency_key => 'ob-1', queue => 'q-ob')",
    )
    fetch_all(database_url, "update jobs.outbox set published_at = now() - interval '8 days'")
    # the event expires on the database's clock, without waiting out its ttl
    fetch_all(database_url, "update jobs.events set expires_at = now() - interval '1 second'")

    asyncio.run(_lead_rounds(_scheduler(database_url, retention=None), 2))
    assert fetch_all(database_url, "select count(*) from jobs.jobs where state = 'done'") == [(1,)]

    asyncio.run(_lead_rounds(_scheduler(database_url), 1))
    assert fetch_all(
        database_url,
        "select (select count(*) from jobs.jobs where state = 'done'),"
        " (select count(*) from jobs.steps), (select count(*) from jobs.outbox),"
        " (select count(*) from jobs.events)",
    ) == [(0, 0, 0, 0)], "the done job, its step, the published outbox row and the event"


def test_a_sweep_left_behind_goes_on_at_the_next_minute_then_waits_an_hour(database_url):
    with Client.connect(database_url) as client:
        for n in range(5):
            finished_job(client, f"behind-{n}", step=False)
    age_finished(database_url, 15)
    retention = Retention.of(batch_size=1, max_batches=2)
    sweep = RetentionSweep(retention)
    scheduler = _scheduler(database_url, retention=None, maintenance=[sweep])
    left = []

    def count_left():
        left.append(fetch_all(database_url, "select count(*) from jobs.jobs")[0][0])

    asyncio.run(_lead_rounds(scheduler, 4, after_each=count_left))
    # 2 a round while behind; the round that found the last one leaves a full hour to the next
    assert left == [3, 1, 0, 0]
    with Client.connect(database_url) as client:
        finished_job(client, "after", step=False)
    age_finished(database_url, 15)
    asyncio.run(_lead_rounds(scheduler, 2))
    assert fetch_all(database_url, "select count(*) from jobs.jobs") == [(1,)], (
        "not before the hour"
    )
