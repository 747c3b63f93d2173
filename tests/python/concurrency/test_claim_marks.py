"""A held xmin horizon (another session's open snapshot) against the claim: the entries claimed
rows leave behind in jobs_claim_idx cannot be marked dead or vacuumed, and a claim that read from
the head of the index would walk all of them. A claiming session keeps marks and starts after
them; a row behind a mark still comes out at the next read from the head; with nothing held, no
mark is kept and the order is exact."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

CLAIM = (
    "select id, claim from jobs.claim_v1(array['marks'], 'w-marks', %s,"
    " visibility => interval '30 s', recover_lapsed => false)"
)
WALKED = "select pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass)"
ACK = "select count(*) from jobs.ack_many_v1('w-marks', %s::uuid[], %s::bigint[])"


def _enqueue(connection: psycopg.Connection[Any], prefix: str, count: int, priority: int = 0):
    rows = [
        {
            "name": "marked",
            "queue": "marks",
            "input": {},
            "idempotency_key": f"{prefix}{n}",
            "priority": priority,
        }
        for n in range(count)
    ]
    return [
        row[0]
        for row in connection.execute(
            "select id from jobs.enqueue_many(%s::jsonb)", [json.dumps(rows)]
        ).fetchall()
    ]


def _drain(connection: psycopg.Connection[Any]) -> int:
    """Claim and ack in batches of 500, each its own transaction, until nothing is due."""
    done = 0
    while rows := connection.execute(CLAIM, [500]).fetchall():
        connection.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows]])
        done += len(rows)
    return done


def _marks(connection: psycopg.Connection[Any]) -> str:
    return connection.execute(
        "select coalesce(current_setting('jobs.claim_marks', true), '')"
    ).fetchone()[0]


def _walked_by_empty_claim(connection: psycopg.Connection[Any]) -> int:
    """The entries of jobs_claim_idx an empty claim reads, counted inside one transaction."""
    with connection.transaction():
        index = "'jobs.jobs_claim_idx'::regclass"
        (before,) = connection.execute(
            f"select pg_stat_get_xact_tuples_returned({index})"
        ).fetchone()
        assert connection.execute(CLAIM, [10]).fetchall() == []
        (after,) = connection.execute(
            f"select pg_stat_get_xact_tuples_returned({index})"
        ).fetchone()
    return int(after - before)


@pytest.fixture
def held_horizon(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session idle in a repeatable-read transaction: its snapshot holds the xmin horizon."""
    with psycopg.connect(database_url) as holder:
        holder.execute("set transaction isolation level repeatable read")
        holder.execute("select count(*) from pg_class")  # the snapshot is taken here
        yield holder
        holder.rollback()


def test_behind_a_held_snapshot_an_empty_claim_starts_after_its_session_s_mark(
    database_url, held_horizon
):
    with psycopg.connect(database_url, autocommit=True) as claimer:
        _enqueue(claimer, "a", 3_000)
        assert _drain(claimer) == 3_000
        assert "marks" in json.loads(_marks(claimer)), "the drain walked far but kept no mark"
        assert _walked_by_empty_claim(claimer) < 100

        # a session without marks reads from the head, through every entry the drain left: the
        # cost the marks spare
        with psycopg.connect(database_url, autocommit=True) as fresh:
            assert _walked_by_empty_claim(fresh) >= 3_000
            assert "marks" in json.loads(_marks(fresh)), "it marks once it has walked that far"


def test_a_row_that_comes_in_behind_a_mark_is_handed_out_at_the_next_read_from_the_head(
    database_url, held_horizon
):
    with psycopg.connect(database_url, autocommit=True) as claimer:
        _enqueue(claimer, "b", 3_000)
        _drain(claimer)
        assert "marks" in json.loads(_marks(claimer))
        # priority -5 sorts before every row handed out so far: behind the mark
        [behind] = _enqueue(claimer, "urgent", 1, priority=-5)
        deadline = time.monotonic() + 10  # the marks stand 1 s; this only bounds a failure
        taken: list[Any] = []
        while not taken:
            assert time.monotonic() < deadline, "the row behind the mark never came out"
            taken = [row[0] for row in claimer.execute(CLAIM, [10]).fetchall()]
            time.sleep(0.05)
        assert taken == [behind]


def test_with_nothing_held_no_mark_is_kept_and_the_order_is_exact(database_url):
    with psycopg.connect(database_url, autocommit=True) as claimer:
        _enqueue(claimer, "c", 3_000)
        assert _drain(claimer) == 3_000
        assert _marks(claimer) == "", "a claim kept marks with nothing holding the horizon"
        [later] = _enqueue(claimer, "later", 1, priority=0)
        [sooner] = _enqueue(claimer, "sooner", 1, priority=-5)
        assert [row[0] for row in claimer.execute(CLAIM, [1]).fetchall()] == [sooner]
        assert [row[0] for row in claimer.execute(CLAIM, [1]).fetchall()] == [later]
