"""The scheduler's test kit: a clock the test moves, an app of hourly report tasks, and what
their fires left in the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pydantic import BaseModel

import durajobs
from durajobs._db import calls
from support.factory import declare

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Report(BaseModel):
    at: str


class Clock:
    """A clock that stands still until the test moves `now` (at the real time unless given)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC) if now is None else now

    def __call__(self) -> datetime:
        return self.now


def report_app(
    database_url: str,
    *,
    catch_up: str = "skip",
    max_catch_up: int = 10,
    cron: str = "0 * * * *",
    tasks: int = 1,
) -> durajobs.Registry:
    """A registry with a `report` job and `tasks` tasks (named hourly, or hourly-N) each firing
    one report per occurrence."""
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "report", input=Report, idempotency_key=lambda r: r.at)
    async def report(ctx):
        return None

    for n in range(tasks):
        registry.task(
            name=f"hourly-{n}" if tasks > 1 else "hourly",
            cron=cron,
            tz="UTC",
            catch_up=catch_up,
            max_catch_up=max_catch_up,
        )(lambda occurrence: [(report, {"at": occurrence.isoformat()})])
    return registry


def reports(database_url: str) -> list[str]:
    """The occurrence of each report job enqueued, in order."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        return [
            row[0]
            for row in connection.execute(
                "select input ->> 'at' from jobs.jobs order by input ->> 'at'"
            ).fetchall()
        ]


def run_sql(database_url: str, query: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(query)


def set_watermark(database_url: str, task: str, watermark: datetime) -> None:
    """Arm `task` and set its stored watermark, as a scheduler that ran before would have."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.scheduler_arm(task, watermark))
        connection.execute(
            "update jobs.scheduler_tasks set watermark = %s where task = %s", [watermark, task]
        )


async def ticks(
    scheduler: Any, clock: Clock, count: int = 1, step: timedelta = timedelta(seconds=1)
) -> list[int]:
    """Open `scheduler`'s pool, tick it `count` times `step` of `clock` apart; answer each tick's
    number of fires."""
    await scheduler.db.open()
    try:
        fired = []
        for _ in range(count):
            fired.append(await scheduler.tick_once())
            clock.now += step
        return fired
    finally:
        await scheduler.db.close()
