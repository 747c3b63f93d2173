"""Jobs under concurrency limits, run by real worker processes. Each handler writes its own
start and end to the table `limit_effects` (clock_timestamp, from its own connection), so the
overlap a test measures does not depend on what durajobs reports about itself."""

from __future__ import annotations

import asyncio
import os

import psycopg
from pydantic import BaseModel

from durajobs import Concurrency, JobContext, Registry
from support.factory import declare

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)
EFFECTS = """create table if not exists limit_effects
  (job text, key text, n int, pid int, started timestamptz, ended timestamptz)"""


class Work(BaseModel):
    n: int
    key: str = ""
    seconds: float = 0.03
    # only the first attempt takes this long: a killed worker's re-taken run then ends at once
    first_attempt_seconds: float | None = None


async def _run(ctx: JobContext[Work], job: str) -> None:
    work = ctx.input
    seconds = work.seconds
    if work.first_attempt_seconds is not None and ctx.attempt == 1:
        seconds = work.first_attempt_seconds
    async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as connection:
        row = await connection.execute(
            "insert into limit_effects (job, key, n, pid, started)"
            " values (%s, %s, %s, %s, clock_timestamp()) returning ctid",
            [job, work.key, work.n, os.getpid()],
        )
        (at,) = await row.fetchone()  # type: ignore[misc]
        await asyncio.sleep(seconds)
        await connection.execute(
            "update limit_effects set ended = clock_timestamp() where ctid = %s", [at]
        )


def _key(work: Work) -> str:
    return f"{work.key}:{work.n}"


@declare(registry, "one-at-a-time", input=Work, idempotency_key=_key, concurrency=1)
async def one_at_a_time(ctx: JobContext[Work]) -> None:
    await _run(ctx, "one-at-a-time")


@declare(registry, "three-at-a-time", input=Work, idempotency_key=_key, concurrency=3)
async def three_at_a_time(ctx: JobContext[Work]) -> None:
    await _run(ctx, "three-at-a-time")


@declare(
    registry,
    "per-account",
    input=Work,
    idempotency_key=_key,
    concurrency=Concurrency(key=lambda work: work.key, limit=1),
)
async def per_account(ctx: JobContext[Work]) -> None:
    await _run(ctx, "per-account")


@declare(registry, "unlimited", input=Work, idempotency_key=_key)
async def unlimited(ctx: JobContext[Work]) -> None:
    await _run(ctx, "unlimited")


# its tenant is the input's key; the limits it meets are set in SQL by the tests
@declare(
    registry,
    "tenant-work",
    input=Work,
    idempotency_key=_key,
    tenant=lambda work: work.key,
    queue="tenants",
)
async def tenant_work(ctx: JobContext[Work]) -> None:
    await _run(ctx, "tenant-work")
