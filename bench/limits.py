"""The burn-down under limits against the same burn-down with none, in one run.

    bench/limits.py --database-url URL [--jobs 20000] [--reps 3]

Each repetition drains `--jobs` no-op jobs with one Worker (the benchmark's configuration,
bench/systems/durajobs_system.py) from a fresh schema, in turn:

- unlimited:  no limit anywhere (the claim's plain path);
- keyed:      one job declared `concurrency=Concurrency(key=i % 1000, limit=1)`: 1,000 keys,
              at most one run per key;
- tenants:    100 tenants (i % 100) under `jobs.set_limit(every_tenant => true,
              concurrency => 2)`: at most 2 running per tenant.

Prints a Markdown table of jobs/s (median, min-max) and each case's ratio to the unlimited
median, from the first handler start to the last handler end. Nothing lost or doubled: every
case checks each job ran exactly once.

Then the cost of a backlog held back at the head of a queue: one tenant at its cap (2) with
`--backlog` rows waiting ahead of 2,000 rows of 50 other tenants, and the median time of a claim
of 50 (claim_v1, no lapsed recovery) against the same claim with no held backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from pydantic import BaseModel

import durajobs
from durajobs.runtime.worker import Worker

QUEUE = "bench"
WORKER_CONFIG: dict[str, Any] = {"concurrency": 50, "listen": True, "freeze_gc": False}
KEYS = 1000
TENANTS = 100
PER_TENANT = 2


class Payload(BaseModel):
    i: int
    tenant: str | None = None


def _registry(
    url: str, case: str, seen: list[int], done: asyncio.Event, count: int, marks: list[float]
) -> Any:
    registry = durajobs.Registry(database_url=url)
    options: dict[str, Any] = {}
    if case == "keyed":
        options["concurrency"] = durajobs.Concurrency(key=lambda p: str(p.i % KEYS), limit=1)
    tenant: Any = (lambda p: p.tenant) if case == "tenants" else "none"

    @registry.job(
        name="noop",
        input=Payload,
        queue=QUEUE,
        idempotency_key=lambda p: str(p.i),
        tenant=tenant,
        **options,
    )
    async def noop(ctx: durajobs.JobContext[Payload]) -> None:
        if not seen:
            marks.append(time.perf_counter())
        seen.append(ctx.input.i)
        if len(seen) >= count:
            marks.append(time.perf_counter())
            done.set()

    return registry


def _fresh(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("drop schema if exists jobs cascade")
    durajobs.migrate(url)


def _enqueue(url: str, case: str, count: int) -> None:
    with durajobs.Client.connect(url) as client:
        if case == "tenants":
            client.set_limit(every_tenant=True, concurrency=PER_TENANT)
        for first in range(0, count, 1000):
            requests = []
            for i in range(first, min(first + 1000, count)):
                request: dict[str, Any] = {
                    "name": "noop",
                    "queue": QUEUE,
                    "input": {"i": i},
                    "idempotency_key": str(i),
                }
                if case == "keyed":
                    request["concurrency_key"] = str(i % KEYS)
                if case == "tenants":
                    request["input"]["tenant"] = request["tenant_id"] = f"t{i % TENANTS}"
                requests.append(request)
            client.enqueue_many(requests)


async def _drain(url: str, case: str, count: int) -> float:
    seen: list[int] = []
    marks: list[float] = []  # the first handler start, the last handler end
    done = asyncio.Event()
    registry = _registry(url, case, seen, done, count, marks)
    if case == "keyed":
        with durajobs.Client.connect(url) as client:
            registry.declare(client, declared_by="bench")
    worker = Worker(registry, url, queues=[QUEUE], **WORKER_CONFIG)
    runner = asyncio.ensure_future(worker.run())
    await asyncio.wait_for(done.wait(), 600)
    seconds = marks[-1] - marks[0]
    worker.stop()
    await runner
    if sorted(seen) != list(range(count)):
        raise SystemExit(f"{case}: {len(seen)} runs, {len(set(seen))} distinct of {count}")
    return count / seconds


def measure(url: str, case: str, count: int) -> float:
    _fresh(url)
    if case == "keyed":
        # the declaration first: the rows are enqueued capped
        _registry_declared(url)
    _enqueue(url, case, count)
    return asyncio.run(_drain(url, case, count))


def _registry_declared(url: str) -> None:
    registry = _registry(url, "keyed", [], asyncio.Event(), 0, [])
    with durajobs.Client.connect(url) as client:
        registry.declare(client, declared_by="bench")


def held_backlog_claim_ms(url: str, backlog: int, samples: int = 15) -> float:
    """The median ms of a claim of 50 with `backlog` rows of one capped-out tenant at the head."""
    _fresh(url)
    with durajobs.Client.connect(url) as client:
        client.set_limit(every_tenant=True, concurrency=PER_TENANT)
        for first in range(0, backlog, 1000):
            client.enqueue_many(
                [
                    {
                        "name": "n",
                        "queue": QUEUE,
                        "input": {},
                        "idempotency_key": f"a{i}",
                        "tenant_id": "noisy",
                    }
                    for i in range(first, min(first + 1000, backlog))
                ]
            )
        client.enqueue_many(
            [
                {
                    "name": "n",
                    "queue": QUEUE,
                    "input": {},
                    "idempotency_key": f"b{i}",
                    "tenant_id": f"t{i % 50}",
                }
                for i in range(2000)
            ]
        )
        if backlog:
            client.claim([QUEUE], "bench-holder", batch_size=PER_TENANT)  # noisy is at its cap
    timings = []
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("vacuum analyze jobs.jobs")
        for n in range(samples):
            with connection.transaction():
                began = time.perf_counter()
                connection.execute(
                    "select count(*) from jobs.claim_v1(queues => %s, worker_id => %s,"
                    " batch_size => 50, recover_lapsed => false)",
                    [[QUEUE], f"bench-{n}"],
                )
                timings.append((time.perf_counter() - began) * 1000)
                raise psycopg.Rollback()  # each sample meets the same table
    return statistics.median(timings)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=20000)
    args = parser.parse_args(argv)
    cases = ["unlimited", "keyed", "tenants"]
    figures: dict[str, list[float]] = {case: [] for case in cases}
    for rep in range(args.reps):
        for case in cases:  # alternating, so a machine warming up favours none
            rate = measure(args.database_url, case, args.jobs)
            figures[case].append(rate)
            print(f"rep {rep + 1} {case}: {rate:,.0f} jobs/s", file=sys.stderr)
    base = statistics.median(figures["unlimited"])
    describe: dict[str, Callable[[], str]] = {
        "unlimited": lambda: "no limit anywhere",
        "keyed": lambda: f"{KEYS:,} keys, limit 1 each",
        "tenants": lambda: f"{TENANTS} tenants, at most {PER_TENANT} running each",
    }
    print(f"| case | what | jobs/s, median (min-max) of {args.reps} | / unlimited |")
    print("|---|---|---|---|")
    for case in cases:
        values = figures[case]
        median = statistics.median(values)
        print(
            f"| {case} | {describe[case]()} | {median:,.0f} ({min(values):,.0f}-"
            f"{max(values):,.0f}) | {median / base:.2f}x |"
        )
    held = held_backlog_claim_ms(args.database_url, args.backlog)
    clear = held_backlog_claim_ms(args.database_url, 0)
    print()
    print("| claim of 50 | ms, median of 15 |")
    print("|---|---|")
    print(f"| no held backlog | {clear:.1f} |")
    print(
        f"| {args.backlog:,} rows of a tenant at its cap ahead | {held:.1f} ({held / clear:.1f}x) |"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
