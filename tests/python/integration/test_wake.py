"""The enqueue wake: one NOTIFY per queue per 250 ms slot, only for work due now, never a dedupe."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta

import psycopg
import pytest

import durajobs
from durajobs.runtime.wake import QueueWake

SLOT_START = datetime.fromisoformat("2026-01-01T00:00:00+00:00")


@pytest.fixture
def listener(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("listen jobs_wake")
        yield connection


def _heard(listener) -> list[str]:
    """The queues the wakes heard were for: a wake carries a token, never a name (013_wake),
    read back here through the tokens of the queues these tests use."""
    payloads = [notice.payload for notice in listener.notifies(timeout=0.3)]
    queues = ["default", "emails", "reports", "a", "b"]
    tokens = dict(
        listener.execute(
            "select jobs._wake_token(q), q from unnest(%s::text[]) q", [queues]
        ).fetchall()
    )
    assert all(payload in tokens for payload in payloads), payloads
    return [tokens[payload] for payload in payloads]


def _at(client: durajobs.Client, instant: datetime) -> None:
    """Pin the database clock of the client's session (each enqueue is its own transaction)."""
    client.connection.execute("select set_config('durajobs.now', %s, false)", [instant.isoformat()])


def test_ten_enqueues_in_one_slot_announce_once(client, listener):
    for n in range(10):
        _at(client, SLOT_START + timedelta(milliseconds=10 * n))
        client.enqueue("mail", {}, f"mail:{n}")
    assert _heard(listener) == ["default"]

    _at(client, SLOT_START + timedelta(milliseconds=260))  # the next slot
    client.enqueue("mail", {}, "mail:next-slot")
    assert _heard(listener) == ["default"]


def test_each_queue_is_announced_by_its_token_alone(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {"secret": "x"}, "k1", queue="emails")
    client.enqueue("mail", {}, "k2", queue="reports", tenant_id="acme")
    assert sorted(_heard(listener)) == ["emails", "reports"]


def test_a_wake_names_no_queue_to_a_listener_without_the_secret(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {}, "k1", queue="payroll-acme")
    (payload,) = [notice.payload for notice in listener.notifies(timeout=0.3)]
    assert "payroll" not in payload
    assert len(payload) == 32


def test_work_due_later_than_a_second_is_not_announced(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {}, "later", run_at=SLOT_START + timedelta(seconds=5))
    assert _heard(listener) == []
    # a far-off row in the slot does not silence a row due now
    _at(client, SLOT_START + timedelta(milliseconds=20))
    client.enqueue("mail", {}, "now")
    assert _heard(listener) == ["default"]


def test_work_due_within_a_second_is_announced(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {}, "soon", run_at=SLOT_START + timedelta(milliseconds=900))
    assert _heard(listener) == ["default"]


def test_a_dedupe_is_not_announced(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {}, "same")
    assert _heard(listener) == ["default"]
    _at(client, SLOT_START + timedelta(seconds=10))
    assert client.enqueue("mail", {}, "same").deduped
    assert _heard(listener) == []


def test_enqueue_many_announces_each_queue_once_per_statement(client, listener):
    _at(client, SLOT_START)
    requests = [
        {"name": "n", "input": {}, "idempotency_key": f"a{i}", "queue": "a"} for i in range(5)
    ]
    requests += [
        {"name": "n", "input": {}, "idempotency_key": f"b{i}", "queue": "b"} for i in range(3)
    ]
    client.enqueue_many(requests)
    heard = _heard(listener)
    assert sorted(heard) == ["a", "b"]


def test_a_rolled_back_enqueue_announces_nothing(database_url, listener):
    with psycopg.connect(database_url) as connection:
        durajobs.execute(connection, durajobs._db.calls.enqueue("mail", {}, "rolled-back"))
        connection.rollback()
    assert _heard(listener) == []


def test_a_wake_stopped_as_its_probe_is_heard_stops(database_url):
    # asyncio.wait_for before Python 3.12 swallows a cancel that lands in the same loop turn as
    # the awaited event: a worker drained while its listener's probe came back logged
    # jobs.wake.live after jobs.worker.draining and then waited on the listener forever
    async def notify(token: str) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as sender:
            await sender.execute("select pg_notify('jobs_wake', %s)", [token])

    async def stop_around_the_probe(turns: int) -> None:
        stopping: list[asyncio.Task[None]] = []

        async def probe_then_stop(token: str) -> None:
            await notify(token)

            async def stop_later() -> None:
                for _ in range(turns):
                    await asyncio.sleep(0)
                await wake.stop()

            stopping.append(asyncio.get_running_loop().create_task(stop_later()))

        wake = QueueWake(database_url, {"t": "default"}, lambda _queue: None, probe_then_stop)
        wake.start()
        async with asyncio.timeout(10):
            while not stopping:
                await asyncio.sleep(0.001)
        try:
            async with asyncio.timeout(5):
                await stopping[0]
        except TimeoutError:
            pytest.fail(f"the wake did not stop ({turns} loop turns after the probe was sent)")

    async def every_turn() -> None:
        for _ in range(4):
            for turns in range(12):
                await stop_around_the_probe(turns)

    asyncio.run(every_turn())


def test_a_wake_stops_even_when_its_probe_drops_the_cancel(database_url):
    # psycopg_pool waits for a pooled connection with asyncio.wait_for, which on Python 3.11
    # drops a cancel landing with its result: one cancel let the probe pass and the listener
    # wait forever (the worker's teardown hung); stop() cancels until the task has ended
    in_probe = asyncio.Event()

    async def probe_that_drops_a_cancel(token: str) -> None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as sender:
            await sender.execute("select pg_notify('jobs_wake', %s)", [token])
        in_probe.set()
        with contextlib.suppress(asyncio.CancelledError):  # dropped, as wait_for can
            await asyncio.sleep(0.3)

    async def scenario() -> None:
        wake = QueueWake(
            database_url, {"t": "default"}, lambda _queue: None, probe_that_drops_a_cancel
        )
        wake.start()
        async with asyncio.timeout(10):
            await in_probe.wait()
        try:
            async with asyncio.timeout(5):
                await wake.stop()
        except TimeoutError:
            pytest.fail("the wake did not stop after its probe dropped the cancel")

    asyncio.run(scenario())
