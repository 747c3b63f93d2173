"""jobs.purge from two sessions at once (R73): a run split across two calls keeps no orphan
steps."""

from __future__ import annotations

import threading

import psycopg

from durajobs.client import Client
from support.purging import age_finished, finished_job
from support.rows import fetch_all
from support.waiting import wait_until


def test_two_purges_splitting_a_run_leave_none_of_its_steps(database_url):
    # each call takes one row of the run (batch 1, skip locked); without serialising them, each
    # saw the other's row still standing and kept the run's steps: orphans nobody deletes
    with Client.connect(database_url) as client:
        first = finished_job(client, "split-1")
        run_id = fetch_all(database_url, "select run_id from jobs.jobs where id = %s", (first,))[0][
            0
        ]
        finished_job(client, "split-2", run_id=run_id, step=False)
    age_finished(database_url, 20)
    assert fetch_all(database_url, "select count(*) from jobs.steps") == [(1,)]

    holder = psycopg.connect(database_url)  # a transaction left open
    second_answer: list[tuple[int, int]] = []
    try:
        taken = holder.execute("select jobs, steps from jobs.purge(batch_size => 1)").fetchone()
        assert taken == (1, 0), "the first call takes one row; the run's other row stands"

        def second() -> None:
            with psycopg.connect(database_url, autocommit=True) as connection:
                row = connection.execute(
                    "select jobs, steps from jobs.purge(batch_size => 1)"
                ).fetchone()
                assert row is not None
                second_answer.append(row)

        racer = threading.Thread(target=second)
        racer.start()
        # until the second purge waits on the first one's session (or, wrongly, is done)
        wait_until(
            lambda: not racer.is_alive() or _blocked_by(database_url, holder.info.backend_pid),
            what="the second purge's wait",
        )
        assert racer.is_alive(), "a second purge waits for the first to end"
        holder.commit()
        racer.join(10)
    finally:
        holder.close()
    assert second_answer == [(1, 1)], "it then sees the run's last row go, and its step with it"
    assert fetch_all(database_url, "select count(*) from jobs.jobs") == [(0,)]
    assert fetch_all(database_url, "select count(*) from jobs.steps") == [(0,)]


def _blocked_by(database_url: str, pid: int) -> bool:
    """Answer whether some session waits on a lock that backend `pid` holds."""
    return fetch_all(
        database_url,
        "select exists (select 1 from pg_stat_activity where %s = any(pg_blocking_pids(pid)))",
        [pid],
    ) == [(True,)]
