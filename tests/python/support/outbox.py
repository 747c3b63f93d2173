"""The outbox relay's test kit: jobs staged in an application's database, relays between it and
a queue's database, and what each database holds afterwards."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import psycopg

import durajobs
from durajobs.services.relay import OutboxRelay
from support.factory import declare, noop
from support.models import NotedItem
from support.rows import fetch_all

# the two layouts: the outbox and the queue in one database, or the queue in a second one
WHERE = ["same database", "two databases"]


def send_job(registry: durajobs.Registry, name: str = "send", handler: Any = None) -> Any:
    """Declare a NotedItem job `name` on `registry`, running `handler` (by default: nothing)."""
    return declare(registry, name, input=NotedItem)(handler or noop)


def job_rows(database_url: str) -> list[tuple[Any, ...]]:
    """Each job in the database: (id, run_id), by id."""
    return fetch_all(database_url, "select id, run_id from jobs.jobs order by id")


def outbox_rows(database_url: str) -> list[tuple[Any, ...]]:
    """Each outbox row in staging order: (id, claimed_by, leased, published)."""
    return fetch_all(
        database_url,
        "select id, claimed_by, claim_expires_at is not null, published_at is not null"
        " from jobs.outbox order by staged_at, seq",
    )


def stage(app_url: str, job: Any, keys: list[str]) -> list[Any]:
    """Stage one job per key in one committed transaction of the application's database.

    Each stage in its own millisecond, so these tests do not lean on the order within one
    millisecond of one transaction, which test_rows_staged_within_one_millisecond_... checks."""
    staged = []
    with psycopg.connect(app_url) as connection:
        for key in keys:
            if staged:
                time.sleep(0.002)
            staged.append(job.enqueue({"key": key}, using=connection))
    return staged


def queue_database(where: str, database_url: str, make_empty_database: Any) -> str:
    """The queue's database for a parametrised test: the app's own, or a second one."""
    if where == "same database":
        return database_url
    url: str = make_empty_database()
    durajobs.migrate(url)
    return url


def relay_into(app_url: str, queue_url: str, **options: Any) -> OutboxRelay:
    """A relay from `app_url`'s outbox into `queue_url` (the same database when they are equal)."""
    return OutboxRelay(app_url, None if queue_url == app_url else queue_url, **options)


def record_publishes(relay: OutboxRelay, published: list[Any]) -> None:
    """Append (staged id, enqueue answer) for every publish the relay makes, in order. The
    one-call pass answers no staged ids: there the first item is the answer's id."""
    databases = {id(relay.source): relay.source, id(relay.target): relay.target}
    for database in databases.values():
        real = database.run

        async def recording(call, real=real):
            answer = await real(call)
            if call.function == "jobs.outbox_relay":  # the one-call pass: answers in order
                published.extend((result.id, result) for result in answer)
            elif call.function == "jobs.enqueue":  # a publish into the queue's database
                published.append((call.params["id"], answer))
            return answer

        database.run = recording


async def eventually(
    check: Any, *, timeout: float = 10.0, every: float = 0.02, what: str = "the condition"
) -> Any:
    """Await `check()` until it answers something true; answer that. A plain function's
    answer is taken as it is, an awaitable's is awaited."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return answer
        assert time.monotonic() < deadline, f"{what} did not hold in time"
        await asyncio.sleep(every)


def published_in(database_url: str, ids: list[Any]) -> Any:
    """A check for `eventually`: are the outbox rows `ids` all marked published?"""

    async def check() -> bool:
        published = await asyncio.to_thread(
            fetch_all,
            database_url,
            "select count(*) from jobs.outbox where published_at is not null and id = any(%s)",
            [list(ids)],
        )
        return bool(published[0][0] == len(ids))

    return check


def crash_once_before_the_mark(relay: OutboxRelay) -> None:
    """Make `relay`'s first mark raise, as if it died between the publish and the mark."""
    real = relay.mark_published
    crashes = {"left": 1}

    async def mark_published(ids):
        if crashes["left"]:
            crashes["left"] -= 1
            raise RuntimeError("the relay died between the publish and the mark")
        return await real(ids)

    relay.mark_published = mark_published


def counting_job(queue_url: str, ran: list[str]) -> tuple[durajobs.Registry, Any]:
    """An outbox registry on `queue_url` and its `charge` job, which appends each key it runs."""
    registry = durajobs.Registry(queue_url, outbox=True)

    async def charge(ctx):
        ran.append(ctx.input.key)

    return registry, send_job(registry, name="charge", handler=charge)


def staged_rows(database_url: str) -> list[tuple[Any, ...]]:
    """Each outbox row by id: (id, run_id, published_at)."""
    return fetch_all(database_url, "select id, run_id, published_at from jobs.outbox order by id")
