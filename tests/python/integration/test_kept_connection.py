"""AsyncDatabase keeps the connection of its last call out of the pool for its next call, so an
idle worker's pickup skips the pool's take and give-back; a call that waits for the pool still
gets a connection as soon as one is free, and closing gives the kept one back."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from durajobs._db import calls, database
from durajobs._db.database import AsyncDatabase

BACKEND = calls.Call("pg_backend_pid", "select pg_backend_pid()", {}, lambda rows: rows[0][0])


def _nap(seconds: float) -> calls.Call[None]:
    return calls.Call("pg_sleep", f"select pg_sleep({seconds})", {}, lambda rows: None)


def _sessions(database_url: str) -> int:
    """The sessions on the test database, this one's own left out."""
    with psycopg.connect(database_url, autocommit=True) as admin:
        row = admin.execute(
            "select count(*) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _backends_of_calls_in_a_row(database_url: str) -> list[int]:
    """The backend each of six calls in a row ran on, with three connections open: the pool
    alone would hand them out in turn."""

    async def scenario() -> list[int]:
        db = AsyncDatabase(database_url, min_size=3, max_size=3)
        await db.open()
        try:
            await asyncio.gather(*(db.run(_nap(0.05)) for _ in range(3)))
            return [await db.run(BACKEND) for _ in range(6)]
        finally:
            await db.close()

    return asyncio.run(scenario())


def test_calls_one_after_another_run_on_the_connection_kept_from_the_last(database_url):
    backends = _backends_of_calls_in_a_row(database_url)
    assert len(set(backends)) == 1, f"the calls ran on backends {backends}"


def test_a_call_waiting_for_the_pool_gets_the_connection_a_call_gives_back(database_url):
    async def scenario() -> list[float]:
        db = AsyncDatabase(database_url, min_size=1, max_size=1, wait_timeout=2.0)
        await db.open()
        try:
            loop = asyncio.get_running_loop()
            began = loop.time()

            async def timed(seconds: float) -> float:
                await db.run(_nap(seconds))
                return loop.time() - began

            # the second waits in the pool while the first runs on the only connection
            return list(await asyncio.gather(timed(0.3), timed(0.0)))
        finally:
            await db.close()

    first, second = asyncio.run(scenario())
    assert first < second < 1.5, "the waiting call was served when the first gave back"


def test_a_kept_connection_goes_back_to_the_pool_after_keep_seconds(database_url, monkeypatch):
    monkeypatch.setattr(database, "KEEP_SECONDS", 0.0)
    # kept for no time at all, each connection goes back and the pool hands them out in turn
    assert len(set(_backends_of_calls_in_a_row(database_url))) > 1


@pytest.mark.parametrize("calls_before", [0, 3])
def test_closing_gives_the_kept_connection_back_and_ends_every_session(database_url, calls_before):
    before = _sessions(database_url)

    async def scenario() -> int:
        db = AsyncDatabase(database_url, min_size=1, max_size=2)
        await db.open()
        for _ in range(calls_before):
            await db.run(BACKEND)
        await db.close()
        # counted while `db` still holds whatever it kept: a session ends moments after its
        # connection closes, so the count is read until it drops (or a second passes)
        for _ in range(20):
            left = _sessions(database_url)
            if left == before:
                break
            await asyncio.sleep(0.05)
        return left

    assert asyncio.run(scenario()) == before


def test_every_call_on_a_connection_runs_on_its_one_kept_cursor(database_url):
    async def scenario() -> tuple[set[int], list[int]]:
        db = AsyncDatabase(database_url, min_size=1, max_size=1)
        await db.open()
        try:
            cursors, answers = set(), []
            for _ in range(3):
                answers.append(await db.run(BACKEND))
                kept = db._kept
                assert kept is not None
                cursor = kept.kept_cursor()
                # the call's answer is still on the cursor: the call ran on it
                assert cursor.pgresult is not None
                cursors.add(id(cursor))
            return cursors, answers
        finally:
            await db.close()

    cursors, answers = asyncio.run(scenario())
    assert len(cursors) == 1, "each call made a cursor of its own"
    assert len(set(answers)) == 1


def test_a_failed_call_leaves_the_kept_cursor_answering_the_next(database_url):
    failing = calls.Call("jobs.enqueue", "select 1/0", {}, lambda rows: rows[0][0])

    async def scenario() -> int:
        db = AsyncDatabase(database_url, min_size=1, max_size=1)
        await db.open()
        try:
            with pytest.raises(psycopg.errors.DivisionByZero):
                await db.run(failing)
            return await db.run(calls.Call("one", "select 41 + 1", {}, lambda rows: rows[0][0]))
        finally:
            await db.close()

    assert asyncio.run(scenario()) == 42


def test_a_closed_kept_cursor_is_replaced(database_url):
    async def scenario() -> tuple[bool, int]:
        db = AsyncDatabase(database_url, min_size=1, max_size=1)
        await db.open()
        try:
            first = await db.run(BACKEND)
            kept = db._kept
            assert kept is not None
            old = kept.kept_cursor()
            await old.close()
            second = await db.run(BACKEND)
            return kept.kept_cursor() is not old, second - first
        finally:
            await db.close()

    replaced, moved = asyncio.run(scenario())
    assert replaced
    assert moved == 0, "the call ran on another connection"
