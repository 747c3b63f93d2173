"""Jobs the process-level children test runs: `children.fan` enqueues `count` children
(`children.number`, each keyed by a key of its own, so only the step records keep a replay
from enqueueing one twice), waits for them, then notes its total in children_after (one row per
run of the code after the wait) and returns it. A child takes CHILD_SECONDS (env) and returns
its n."""

from __future__ import annotations

import asyncio
import os
import uuid

import psycopg
from pydantic import BaseModel

from durajobs import Registry

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)


class Fan(BaseModel):
    count: int


class Number(BaseModel):
    n: int


@registry.job(
    name="children.number",
    input=Number,
    idempotency_key=lambda _number: uuid.uuid4().hex,
    tenant="none",
)
async def number(ctx):
    await asyncio.sleep(float(os.environ.get("CHILD_SECONDS", "0")))
    return ctx.input.n


def _note_total(job_id: object, total: int) -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute(
            "insert into children_after (job_id, total) values (%s, %s)", [job_id, total]
        )


@registry.job(
    name="children.fan",
    input=Fan,
    idempotency_key=lambda fan: f"fan:{fan.count}",
    tenant="none",
)
async def fan(ctx):
    kids = [await ctx.step.enqueue(number, {"n": n}) for n in range(ctx.input.count)]
    total = sum(await ctx.step.wait_for(*kids))
    await asyncio.to_thread(_note_total, ctx.job_id, total)
    return total
