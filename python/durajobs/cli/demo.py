"""The demo: a real worker doing real work on a real Postgres.

It installs the schema, enqueues a batch from plain SQL (as a Go or Node service would) and from
Python, then runs a worker until every job has settled: durable steps, a retry, a sleep that
parks the run, and a dead letter, with a progress bar and a closing summary.
Run by `durajobs demo` (the README's first command); with no DATABASE_URL it runs on an embedded
Postgres that it removes afterwards.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from pydantic import BaseModel

from durajobs._db.migrations import migrate
from durajobs.client import Client
from durajobs.declare.registry import Registry
from durajobs.declare.retry import ErrorClass, RetryPolicy, register_error_class
from durajobs.errors import DurajobsError
from durajobs.runtime.attempt import JobContext, SyncJobContext
from durajobs.runtime.worker import Worker

Print = Callable[[str], None]


class Signup(BaseModel):
    user_id: int


class CardDeclined(DurajobsError):
    """A terminal failure: retrying a declined card only annoys the bank."""

    code = "X_DEMO_CARD_DECLINED"
    fix = "ask the customer for another card"


register_error_class(CardDeclined.code, ErrorClass.TERMINAL)


def build_registry(database_url: str) -> Registry:
    """Declare the demo's jobs."""
    registry = Registry(database_url=database_url)

    @registry.job(
        name="send-welcome",
        input=Signup,
        queue="emails",
        idempotency_key=lambda s: f"welcome:{s.user_id}",
        tenant="none",
    )
    async def send_welcome(ctx: JobContext[Signup]) -> str:
        body = await ctx.step.run("render", lambda: f"Welcome, user {ctx.input.user_id}!")
        await ctx.step.run("send", lambda: {"to": ctx.input.user_id, "bytes": len(body)})
        return "sent"

    @registry.job(
        name="sync-crm",
        input=Signup,
        queue="crm",
        idempotency_key=lambda s: f"crm:{s.user_id}",
        tenant="none",
        retry=RetryPolicy.of(attempts=3, delay="200ms", jitter=False),
    )
    def sync_crm(ctx: SyncJobContext[Signup]) -> None:
        ctx.step.run("look-up", lambda: {"crm_id": 1000 + ctx.input.user_id})
        if ctx.input.user_id % 10 == 3 and ctx.attempt == 1:
            raise ConnectionError("the CRM answered 503")  # retried, its step not redone

    @registry.job(
        name="follow-up",
        input=Signup,
        queue="emails",
        idempotency_key=lambda s: f"follow-up:{s.user_id}",
        tenant="none",
    )
    async def follow_up(ctx: JobContext[Signup]) -> None:
        await ctx.step.run("note", lambda: "signed up")
        await ctx.step.sleep("wait-a-moment", "1s")  # parks the run: no process waits
        await ctx.step.run("nudge", lambda: "how is it going?")

    @registry.job(
        name="charge-card",
        input=Signup,
        queue="billing",
        idempotency_key=lambda s: f"charge:{s.user_id}",
        tenant="none",
        retry=RetryPolicy.of(attempts=5),
    )
    async def charge_card(ctx: JobContext[Signup]) -> None:
        if ctx.input.user_id == 13:
            raise CardDeclined(f"card of user {ctx.input.user_id} declined")

    return registry


def _enqueue_from_sql(database_url: str, users: range) -> int:
    """Enqueue the way any other language would: plain SQL, named arguments."""
    requests = [
        {
            "name": "send-welcome",
            "queue": "emails",
            "input": {"user_id": n},
            "idempotency_key": f"welcome:{n}",
        }
        for n in users
    ]
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "select * from jobs.enqueue_many(requests => %s::jsonb)", [json.dumps(requests)]
        ).fetchall()
    return len(rows)


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done}/{total}"


def _counts(client: Client) -> dict[str, int]:
    rows = client.connection.execute(
        "select state, count(*) from jobs.jobs group by state"
    ).fetchall()
    return {state: count for state, count in rows}


async def _work(registry: Registry, database_url: str, total: int, say: Print) -> Worker:
    worker = Worker(registry, database_url, concurrency=8)
    runner = asyncio.ensure_future(worker.run())
    interactive = sys.stdout.isatty()
    with Client.connect(database_url) as client:
        while True:
            counts = await asyncio.to_thread(_counts, client)
            settled = sum(counts.get(state, 0) for state in ("done", "dead", "failed"))
            if interactive:
                print(f"\r  {_bar(settled, total)}", end="", flush=True)
            if settled >= total:
                break
            await asyncio.sleep(0.1)
    if interactive:
        print()
    else:
        say(f"  {_bar(total, total)}")
    worker.stop()
    await runner
    return worker


def run_demo(database_url: str, *, users: int = 40, say: Print = print) -> dict[str, Any]:
    """Run the demo against `database_url`; answer the figures its summary printed."""
    started = time.perf_counter()
    say("durajobs demo")
    migrate(database_url)
    say("  schema installed (alembic upgrade head)")
    registry = build_registry(database_url)

    from_sql = _enqueue_from_sql(database_url, range(users))
    jobs = {name: registry.get(name) for name in ("sync-crm", "follow-up", "charge-card")}
    from_python = 0
    for n in range(users):
        for name in ("sync-crm", "charge-card"):
            jobs[name].enqueue({"user_id": n})  # type: ignore[union-attr]
            from_python += 1
    for n in range(0, users, 10):
        jobs["follow-up"].enqueue({"user_id": n})  # type: ignore[union-attr]
        from_python += 1
    again = jobs["charge-card"].enqueue({"user_id": 0})  # type: ignore[union-attr]
    say(
        f"  enqueued {from_sql} jobs from plain SQL and {from_python} from Python;"
        f" enqueueing charge:0 again deduped={again.deduped}"
    )

    total = from_sql + from_python
    say(f"  a worker runs them (queues {', '.join(registry.queues())}, 8 slots each):")
    worker = asyncio.run(_work(registry, database_url, total, say))

    with Client.connect(database_url) as client:
        counts = _counts(client)
        retried = client.connection.execute(
            "select count(*) from jobs.jobs where state = 'done' and attempt > 1"
        ).fetchone()
        dead = client.connection.execute(
            "select name, attempt, last_error from jobs.jobs where state = 'dead'"
        ).fetchall()
    outcomes = worker.stats().outcomes
    say("  summary:")
    say(
        f"    done {counts.get('done', 0)}, dead {counts.get('dead', 0)}, "
        f"failed {counts.get('failed', 0)} of {total} jobs"
    )
    say(
        f"    attempts: {outcomes.get('completed', 0)} completed, "
        f"{outcomes.get('retried', 0)} retried, {outcomes.get('suspended', 0)} suspended "
        f"(sleeping without a process), {outcomes.get('dead-lettered', 0)} dead-lettered"
    )
    say(
        f"    {retried[0] if retried else 0} jobs succeeded on a later attempt, replaying their"
        " stored steps"
    )
    for name, attempt, last_error in dead:
        say(f"    dead letter: {name} after attempt {attempt}: {last_error}")
    say(f"  finished in {time.perf_counter() - started:.1f}s")
    return {
        "total": total,
        "done": counts.get("done", 0),
        "dead": counts.get("dead", 0),
        "outcomes": outcomes,
        "dedupe": again.deduped,
        "visibility": timedelta(seconds=30),
    }
