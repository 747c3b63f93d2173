"""The demo: install the schema, enqueue from SQL and from Python, claim, settle, report.

Run by `durajobs demo` (the README's first command). With no DATABASE_URL it runs on an
embedded Postgres that it removes afterwards.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta

import psycopg

from durajobs.client import Client
from durajobs.migrations import migrate
from durajobs.records import QueueStat
from durajobs.states import NackTarget

Print = Callable[[str], None]

WORKER_ID = "demo-worker"
QUEUES = ("emails", "reports")


def _enqueue_from_sql(database_url: str, count: int) -> int:
    """Enqueue the way a Go or Node service would: plain SQL, named arguments."""
    requests = [
        {
            "name": "send-email",
            "queue": "emails",
            "input": {"to": f"user{n}@example.com"},
            "idempotency_key": f"welcome:{n}",
        }
        for n in range(count)
    ]
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "select * from jobs.enqueue(name => 'send-email', queue => 'emails',"
            " input => '{\"to\": \"ops@example.com\"}', idempotency_key => 'welcome:ops')"
        )
        rows = connection.execute(
            "select * from jobs.enqueue_many(requests => %s::jsonb)", [json.dumps(requests)]
        ).fetchall()
    return 1 + len(rows)


def _print_stats(stats: list[QueueStat], say: Print) -> None:
    say(f"  {'queue':<10}{'ready':>7}{'delayed':>9}{'running':>9}{'suspended':>11}{'dead':>6}")
    for stat in stats:
        say(
            f"  {stat.queue:<10}{stat.ready:>7}{stat.delayed:>9}{stat.running:>9}"
            f"{stat.suspended:>11}{stat.dead:>6}"
        )


def run_demo(database_url: str, *, jobs: int = 200, say: Print = print) -> dict[str, int]:
    """Run the demo against `database_url`; answer the counts it printed in its summary."""
    started = time.perf_counter()
    say("durajobs demo")
    migrate(database_url)
    say("  schema installed (alembic upgrade head)")

    from_sql = _enqueue_from_sql(database_url, jobs // 2)
    say(f"  enqueued {from_sql} jobs from plain SQL (jobs.enqueue, jobs.enqueue_many)")

    with Client.connect(database_url) as client:
        batch = client.enqueue_many(
            [
                {
                    "name": "build-report",
                    "queue": "reports",
                    "input": {"report": n},
                    "idempotency_key": f"report:{n}",
                }
                for n in range(jobs - jobs // 2)
            ]
        )
        again = client.enqueue("build-report", {"report": 0}, "report:0", queue="reports")
        say(
            f"  enqueued {len(batch)} jobs from Python; enqueueing report:0 again "
            f"deduped={again.deduped} onto the same id"
        )
        say("  before the worker:")
        _print_stats(client.queue_stats(list(QUEUES)), say)

        acked = retried = 0
        while True:
            claimed = client.claim(
                list(QUEUES), WORKER_ID, batch_size=50, visibility=timedelta(seconds=30)
            )
            if not claimed:
                break
            failing = [job for job in claimed if job.input.get("report") == 7 and job.attempt == 1]
            for job in failing:
                # one attempt fails and is retried at once: attempts are counted on the row
                client.nack(
                    job.id,
                    WORKER_ID,
                    job.claim,
                    next_state=NackTarget.READY,
                    error="printer on fire",
                    error_code="X_DEMO_FLAKY",
                )
                retried += 1
            done = [job for job in claimed if job not in failing]
            results = client.ack_many(WORKER_ID, [j.id for j in done], [j.claim for j in done])
            acked += sum(result.landed for result in results)

        say(f"  claimed and acked {acked} jobs ({retried} failed once and were retried)")
        say("  after the worker:")
        _print_stats(client.queue_stats(list(QUEUES)), say)
    say(f"  finished in {time.perf_counter() - started:.2f}s")
    return {"enqueued": from_sql + len(batch), "acked": acked, "retried": retried}
