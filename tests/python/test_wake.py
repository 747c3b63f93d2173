"""The enqueue wake: one NOTIFY per queue per 250 ms slot, only for work due now, never a dedupe."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pytest

import durajobs

SLOT_START = datetime.fromisoformat("2026-01-01T00:00:00+00:00")


@pytest.fixture
def listener(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("listen jobs_wake")
        yield connection


def _heard(listener) -> list[str]:
    return [notice.payload for notice in listener.notifies(timeout=0.3)]


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


def test_each_queue_is_announced_by_its_name_alone(client, listener):
    _at(client, SLOT_START)
    client.enqueue("mail", {"secret": "x"}, "k1", queue="emails")
    client.enqueue("mail", {}, "k2", queue="reports", tenant_id="acme")
    assert sorted(_heard(listener)) == ["emails", "reports"]


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
        durajobs.execute(connection, durajobs.calls.enqueue("mail", {}, "rolled-back"))
        connection.rollback()
    assert _heard(listener) == []
