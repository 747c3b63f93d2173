"""jobs.limits_standing under concurrent writers of limits: a claim trusts that one row to say
whether any limit stands, so two sessions that set limits at once must both be counted, and a
truncate that counts the tables again must count the other session's limit too, whichever of
them commits first."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from durajobs._db import calls
from durajobs._db.execute import execute
from support.waiting import wait_until, waits_on_a_lock

COUNTED = (
    "select (select l.standing from jobs.limits_standing l),"
    " (select count(*) from jobs.declarations d where d.concurrency is not null)"
    " + (select count(*) from jobs.limit_rules)"
)


def _declare_limited(connection: psycopg.Connection[Any]) -> None:
    execute(
        connection,
        calls.declare_job(
            "limited",
            queue="q",
            max_attempts=3,
            priority=0,
            tenant_required=False,
            declared_by="test",
            concurrency=2,
        ),
    )


def _set_limit(connection: psycopg.Connection[Any]) -> None:
    execute(connection, calls.set_limit(queue="q", concurrency=1))


def _insert_rule(connection: psycopg.Connection[Any]) -> None:
    # by hand: it locks nothing of jobs.declarations, so a truncate of that table goes ahead and
    # meets this session only at the counted row
    connection.execute(
        "insert into jobs.limit_rules (queue, concurrency, set_at) values ('q', 1, now())"
    )


def _truncate_declarations(connection: psycopg.Connection[Any]) -> None:
    connection.execute("truncate jobs.declarations cascade")


def _truncate_limit_rules(connection: psycopg.Connection[Any]) -> None:
    connection.execute("truncate jobs.limit_rules cascade")


# (first writer, second writer, the limits standing after both when the first commits)
RACES = {
    "two increments": (_set_limit, _declare_limited, 2),
    "a recount after a rule": (_insert_rule, _truncate_declarations, 1),
    "a recount after a declaration": (_declare_limited, _truncate_limit_rules, 1),
}


@pytest.mark.parametrize("first_commits", [True, False])
@pytest.mark.parametrize("race", list(RACES))
def test_a_second_writer_of_limits_counts_the_first_ones_limit(
    database_url: str, first_commits: bool, race: str
) -> None:
    first_writes, second_writes, standing_after = RACES[race]
    with (
        psycopg.connect(database_url) as first,
        psycopg.connect(database_url, autocommit=True) as second,
        psycopg.connect(database_url, autocommit=True) as observer,
    ):
        # the first session's limit is written and counted, not yet committed
        first_writes(first)
        failures: list[BaseException] = []

        def write() -> None:
            try:
                second_writes(second)
            except BaseException as failure:  # reported below, in the test's thread
                failures.append(failure)

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(
            lambda: waits_on_a_lock(observer, second.info.backend_pid) or failures,
            what="the second writer waiting for the first",
        )
        assert failures == []
        if first_commits:
            first.commit()
        else:
            first.rollback()
        writer.join(10)
        assert not writer.is_alive()
        assert failures == []
        standing, counted = observer.execute(COUNTED).fetchone() or (None, None)
        assert standing == counted
        # the count the two writers left, not merely one consistent with itself
        if first_commits:
            assert standing == standing_after
        else:
            assert standing == (1 if second_writes is _declare_limited else 0)
