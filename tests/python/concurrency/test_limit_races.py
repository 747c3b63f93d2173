"""Two claimers racing for one limited group: the second waits for the first's commit and then
counts its claim, so a limit of 1 is never exceeded, not even for an instant. The group's rows
sit in two queues, so neither claimer sees the other's row among its own candidates: only the
group's lock stands between them. The group is a job's declared limit, a tenant's limit set in
SQL, or a tenant's rate."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest

from durajobs import ArgumentInvalid, ClaimedJob
from durajobs._db import calls
from durajobs._db.execute import execute
from support.waiting import waits_on_a_lock


def _limited(database_url: str, queues: list[str], limit: str = "declared") -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        if limit == "declared":
            execute(
                connection,
                calls.declare_job(
                    "one",
                    queue="q",
                    max_attempts=3,
                    priority=0,
                    tenant_required=False,
                    declared_by="test",
                    concurrency=1,
                ),
            )
        elif limit == "tenant":
            execute(connection, calls.set_limit(tenant_id="acme", concurrency=1))
        else:
            execute(connection, calls.set_limit(tenant_id="acme", rate=1, per=timedelta(hours=1)))
        for n, queue in enumerate(queues):
            execute(connection, calls.enqueue("one", {}, f"k{n}", queue=queue, tenant_id="acme"))


@pytest.mark.parametrize("limit", ["declared", "tenant", "rate"])
@pytest.mark.parametrize(("first_commits", "second_gets"), [(True, 0), (False, 1)])
def test_a_second_claimer_counts_the_first_ones_claim(
    database_url, first_commits, second_gets, limit
):
    _limited(database_url, ["qa", "qb"], limit)
    with (
        psycopg.connect(database_url) as first,
        psycopg.connect(database_url, autocommit=True) as second,
        psycopg.connect(database_url, autocommit=True) as observer,
    ):
        assert len(execute(first, calls.claim(["qa"], "a", batch_size=5))) == 1
        answers: list[list[ClaimedJob]] = []
        racing = threading.Thread(
            target=lambda: answers.append(execute(second, calls.claim(["qb"], "b", batch_size=5)))
        )
        racing.start()
        deadline = time.monotonic() + 10
        while not waits_on_a_lock(observer, second.info.backend_pid):
            assert time.monotonic() < deadline, "the second claim never waited for the first"
            time.sleep(0.01)
        if first_commits:
            first.commit()
        else:
            first.rollback()
        racing.join(10)
        assert not racing.is_alive()
        assert len(answers[0]) == second_gets
        (running,) = observer.execute(
            "select count(*) from jobs.jobs where state = 'running'"
        ).fetchone()
        assert running == 1, "the limit of 1 held across the two queues"


def test_the_limited_claim_refuses_a_snapshot_older_than_its_lock(database_url):
    _limited(database_url, ["q"])
    with psycopg.connect(database_url) as connection:
        connection.execute("set transaction isolation level repeatable read")
        with pytest.raises(ArgumentInvalid, match="read committed"):
            execute(connection, calls.claim(["q"], "a"))
