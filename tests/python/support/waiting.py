"""Waiting without guessing: poll for a condition with a deadline (in async code:
`support.outbox.eventually`), and move the database's clock instead of waiting for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

import psycopg

T = TypeVar("T")


def wait_until(
    check: Callable[[], T],
    *,
    timeout: float = 10.0,
    every: float = 0.02,
    what: str = "the condition",
) -> T:
    """Call `check()` until it answers something true, and answer that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"{what} did not hold within {timeout} s"
        time.sleep(every)


def clock_at(database_url: str, instant: datetime) -> str:
    """The conninfo of `database_url` for sessions whose jobs._now() reads `instant`: every
    connection made with it (a pool's too) starts with `durajobs.now` set."""
    return psycopg.conninfo.make_conninfo(
        database_url, options=f"-c durajobs.now={instant.isoformat()}"
    )


def waits_on_a_lock(observer: psycopg.Connection, pid: int) -> bool:
    """Whether the backend `pid` is waiting for a lock now (read on `observer`)."""
    row = observer.execute(
        "select wait_event_type from pg_stat_activity where pid = %s", [pid]
    ).fetchone()
    return row is not None and row[0] == "Lock"
