"""Jobs the process-level tests run in real worker processes.

Side effects go to the table `effects` in the same database, so a test can count what ran,
across processes and crashes.
"""

from __future__ import annotations

import asyncio
import os
import time

import psycopg

from durajobs import Registry
from durajobs.declare.retry import RetryPolicy
from support.factory import declare
from support.models import TimedItem

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)


def record(run_id: object, what: str) -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute(
            "create table if not exists effects"
            " (run_id text, what text, pid int, at timestamptz default clock_timestamp())"
        )
        connection.execute(
            "insert into effects (run_id, what, pid) values (%s, %s, %s)",
            [str(run_id), what, os.getpid()],
        )


@declare(registry, "noop", input=TimedItem)
async def noop(ctx) -> None:
    return None


@declare(registry, "count", input=TimedItem)
def count(ctx) -> None:
    record(ctx.run_id, "ran")


@declare(registry, "two-steps", input=TimedItem, retry=RetryPolicy.of(attempts=5, delay="50ms"))
def two_steps(ctx) -> str:
    ran_first: list[bool] = []

    def first() -> None:
        record(ctx.run_id, "first")
        ran_first.append(True)

    ctx.step.run("first", first)
    if ran_first:
        # the attempt that ran step one waits, so a test can kill or drain the process here;
        # a later attempt replays step one from storage and goes straight on
        deadline = time.monotonic() + ctx.input.seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.02)
        if ctx.cancelled:
            raise RuntimeError("stopped")
    ctx.step.run("second", lambda: record(ctx.run_id, "second"))
    return "done"


@declare(registry, "slow", input=TimedItem, retry=RetryPolicy.of(attempts=1))
async def slow(ctx) -> None:
    await asyncio.to_thread(record, ctx.run_id, "started")
    await asyncio.sleep(ctx.input.seconds)
    await asyncio.to_thread(record, ctx.run_id, "finished")


@declare(registry, "stubborn", input=TimedItem)
def stubborn(ctx) -> None:
    record(ctx.run_id, "started")
    time.sleep(ctx.input.seconds)  # never looks at ctx.cancelled


@registry.task(name="every-two-seconds", cron="* * * * * */2", tz="UTC")
def every_two_seconds(occurrence):
    return [(noop, {"key": f"tick:{occurrence.isoformat()}"})]
