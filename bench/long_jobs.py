"""The cost of keeping leases: 300 jobs of 3 s each held at once by one Worker (concurrency 300,
visibility 0.9 s, so each lease is renewed every 0.3 s), counting the renewal statements the
worker sends and the process's CPU time while they run.

    bench/long_jobs.py --database-url URL   (drops and re-creates the schema `jobs` there)
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from datetime import timedelta
from typing import Any

import psycopg
from pydantic import BaseModel

import durajobs
from durajobs.runtime.worker import Worker

JOBS = 300
SECONDS = 3.0


class Payload(BaseModel):
    i: int


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database-url", required=True)
    url = parser.parse_args(argv).database_url

    registry = durajobs.Registry(database_url=url)
    done: list[int] = []

    @registry.job(
        name="long", input=Payload, queue="long", idempotency_key=lambda p: str(p.i), tenant="none"
    )
    async def long(ctx: durajobs.JobContext[Payload]) -> None:
        await asyncio.sleep(SECONDS)
        done.append(ctx.input.i)

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("drop schema if exists jobs cascade")
    durajobs.migrate(url)
    with durajobs.Client.connect(url) as client:
        client.enqueue_many(
            [
                {"name": "long", "queue": "long", "input": {"i": i}, "idempotency_key": str(i)}
                for i in range(JOBS)
            ]
        )

    worker = Worker(
        registry,
        url,
        queues=["long"],
        concurrency=JOBS,
        listen=False,
        visibility=timedelta(seconds=0.9),
    )
    renewals = 0
    run = worker.db.run

    async def counting(call: Any) -> Any:
        nonlocal renewals
        if call.function.startswith("jobs.heartbeat"):
            renewals += 1
        return await run(call)

    worker.db.run = counting  # type: ignore[method-assign]

    async def drain() -> None:
        runner = asyncio.ensure_future(worker.run())
        while len(done) < JOBS:
            await asyncio.sleep(0.05)
        worker.stop()
        await runner

    before = resource.getrusage(resource.RUSAGE_SELF)
    began = time.perf_counter()
    asyncio.run(drain())
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(
        f"renewal statements {renewals}, worker CPU {cpu:.2f} s, "
        f"wall {time.perf_counter() - began:.1f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
