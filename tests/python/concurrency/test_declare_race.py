"""Two sessions declaring one new job name at once: the second waits for the first and is
compared against it, so neither declaration is lost and neither call fails."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from durajobs import Declared, DeclareOutcome
from durajobs._db import calls
from durajobs._db.execute import execute
from support.waiting import waits_on_a_lock


def _declare(connection: psycopg.Connection, queue: str, by: str) -> Declared:
    call = calls.declare_job(
        "race", queue=queue, max_attempts=2, priority=0, tenant_required=False, declared_by=by
    )
    return execute(connection, call)


@pytest.mark.parametrize(
    ("second_queue", "outcome"),
    [("q-first", DeclareOutcome.UNCHANGED), ("q-second", DeclareOutcome.CONFLICT)],
)
def test_a_declaration_racing_an_uncommitted_one_is_compared_against_it(
    database_url, second_queue, outcome
):
    with (
        psycopg.connect(database_url) as first,
        psycopg.connect(database_url, autocommit=True) as second,
        psycopg.connect(database_url, autocommit=True) as observer,
    ):
        assert _declare(first, "q-first", "deploy-a").outcome is DeclareOutcome.ADDED
        answers: list[Declared] = []
        racing = threading.Thread(
            target=lambda: answers.append(_declare(second, second_queue, "deploy-b"))
        )
        racing.start()
        deadline = time.monotonic() + 10
        while not waits_on_a_lock(observer, second.info.backend_pid):
            assert time.monotonic() < deadline, "the second declaration never waited"
            time.sleep(0.01)
        assert answers == [], "the second declaration answered before the first committed"
        first.commit()
        racing.join(10)
        assert not racing.is_alive()
        (answer,) = answers
        assert answer.outcome is outcome
        assert answer.stored_by == "deploy-a"
        stored = observer.execute(
            "select queue, declared_by from jobs.declarations where name = 'race'"
        ).fetchall()
        assert stored == [("q-first", "deploy-a")]
