"""jobs.horizon names what holds the database's xmin horizon back: another session's open
snapshot, seen from Python, from `durajobs queues` and in the worker's metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from durajobs.cli import main
from durajobs.observe.metrics import WorkerMetrics


@pytest.fixture
def idle_in_transaction(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session left idle in a repeatable-read transaction after one query."""
    with psycopg.connect(database_url, application_name="report") as holder:
        holder.execute("set transaction isolation level repeatable read")
        holder.execute("select count(*) from pg_class")
        yield holder
        holder.rollback()


def test_nothing_holds_the_horizon_of_a_quiet_database(client):
    assert client.horizon() is None


def test_a_session_idle_in_transaction_is_named_with_its_age(client, idle_in_transaction):
    time.sleep(0.2)
    holder = client.horizon()
    assert holder is not None
    assert (holder.holder, holder.pid, holder.name, holder.state) == (
        "session",
        idle_in_transaction.info.backend_pid,
        "report",
        "idle in transaction",
    )
    assert holder.age_seconds is not None
    assert holder.age_seconds >= 0.2
    assert holder.xid_age >= 0
    assert holder.since is not None

    # the other session's snapshot is gone with its transaction
    idle_in_transaction.rollback()
    assert client.horizon() is None


def test_durajobs_queues_names_the_holder(database_url, idle_in_transaction, capsys):
    assert main(["queues", "--json", "--database-url", database_url]) == 0
    horizon = json.loads(capsys.readouterr().out)["horizon"]
    assert horizon["holder"] == "session"
    assert horizon["pid"] == idle_in_transaction.info.backend_pid
    assert horizon["state"] == "idle in transaction"

    assert main(["queues", "--database-url", database_url]) == 0
    last_line = capsys.readouterr().out.splitlines()[-1]
    assert last_line.startswith("xmin horizon: held for ")
    assert f"by session {idle_in_transaction.info.backend_pid} (" in last_line
    assert "idle in transaction" in last_line


def test_the_worker_metrics_serve_the_horizon_s_age(database_url, idle_in_transaction):
    metrics = WorkerMetrics(database_url, ["default"], in_flight=lambda: 0, capacity=lambda: 1)
    time.sleep(0.2)
    assert metrics.sample("database_xmin_horizon_age_seconds") >= 0.2
    assert metrics.sample("database_xmin_horizon_xid_age") >= 0
    idle_in_transaction.rollback()
    assert metrics.sample("database_xmin_horizon_age_seconds") == 0.0
