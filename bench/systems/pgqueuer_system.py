"""PgQueuer under the benchmark contract (bench/CONTRACT.md).

Run as `python bench/systems/pgqueuer_system.py <action> --database-url URL [options]`.

Driver: asyncpg. PgQueuer's benchmark page (docs/comparisons/benchmarks.md) measures asyncpg at
about 1.7x psycopg's throughput and recommends it for throughput-critical work, and `pgq run`
itself tries asyncpg first and runs on uvloop; so every action here uses one asyncpg connection
and the worker runs on uvloop, as `pgq run` would.

The worker is the "single worker process" of docs/guides/deployment.md: one QueueManager on one
direct asyncpg connection (docs/guides/performance-tuning.md: "Always use a direct asyncpg
connection (not a pool) for the QueueManager"), started through `pgqueuer.run`, the programmatic
twin of `pgq run` (docs/guides/programmatic-run.md). The entrypoint is named `bench`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import version
from typing import Any

import asyncpg
import pgqueuer
import uvloop
from contract import Actions, Tally, emit, enqueue_at_rate, main
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

ENTRYPOINT = "bench"
BULK_BATCH = 1000

# The dequeue batch: docs/guides/performance-tuning.md says to raise it above the default 10
# when jobs are short-lived (< 1 s) and dequeue round trips dominate; these jobs are no-ops.
# Burning down 10,000-20,000 jobs on a shared 2-core box, the rate rose from 10 (~3.5k/s)
# through 100 (~5-11k/s) to a plateau at 500 (~11-15k/s); 1000 was no better.
BATCH_SIZE = 500
# pgq run's defaults for the rest: 30 s NOTIFY wait before a poll, no per-process task cap,
# 30 s heartbeat timeout.
DEQUEUE_TIMEOUT = timedelta(seconds=30)
MAX_CONCURRENT_TASKS: int | None = None
CONFIG = (
    f"pgqueuer {version('pgqueuer')}: one QueueManager on one asyncpg connection "
    f"(AsyncpgDriver), uvloop, pgqueuer.run(batch_size={BATCH_SIZE}, "
    f"dequeue_timeout={DEQUEUE_TIMEOUT.total_seconds():g}s, "
    f"max_concurrent_tasks={MAX_CONCURRENT_TASKS}); schema: install (durable) + autovac"
)


def _payload(i: int) -> bytes:
    return json.dumps({"i": i}).encode()


async def _queries(url: str) -> tuple[asyncpg.Connection, Queries]:
    """One asyncpg connection (autocommit unless a transaction is opened) and its Queries."""
    connection = await asyncpg.connect(dsn=url)
    return connection, Queries(AsyncpgDriver(connection))


# -- setup -------------------------------------------------------------------------------------


async def _setup(url: str) -> None:
    connection, queries = await _queries(url)
    try:
        # `pgq install` (durability "durable", the default), then `pgq autovac`: both are on the
        # deployment checklist of docs/guides/deployment.md.
        await queries.install()
        await queries.optimize_autovacuum()
    finally:
        await connection.close()


def setup(url: str) -> None:
    asyncio.run(_setup(url))
    emit({"ok": True})


# -- enqueue -----------------------------------------------------------------------------------


async def _enqueue_bulk(queries: Queries, first: int, last: int) -> None:
    """Enqueue jobs i = first .. last-1 with the bulk API: Queries.enqueue with lists, one
    INSERT ... SELECT unnest(...) statement, one transaction."""
    await queries.enqueue(
        [ENTRYPOINT] * (last - first),
        [_payload(i) for i in range(first, last)],
        [0] * (last - first),
    )


async def _enqueue(url: str, count: int, mode: str, start: int) -> float:
    connection, queries = await _queries(url)
    try:
        began = time.perf_counter()
        if mode == "single":
            # Queries.enqueue with scalars: one INSERT statement, its own transaction.
            for i in range(start, start + count):
                await queries.enqueue(ENTRYPOINT, _payload(i))
        else:
            for first in range(start, start + count, BULK_BATCH):
                await _enqueue_bulk(queries, first, min(first + BULK_BATCH, start + count))
        return time.perf_counter() - began
    finally:
        await connection.close()


def enqueue(url: str, count: int, mode: str, start: int) -> None:
    seconds = asyncio.run(_enqueue(url, count, mode, start))
    emit({"seconds": seconds})


# -- the worker (work, latency, idle) ------------------------------------------------------------


def _factory(url: str, tally: Tally) -> Callable[[], Any]:
    """The `pgq run` factory: an async context manager yielding the QueueManager."""

    @asynccontextmanager
    async def create() -> AsyncIterator[QueueManager]:
        connection = await asyncpg.connect(dsn=url)
        try:
            manager = QueueManager(Queries(AsyncpgDriver(connection)))

            @manager.entrypoint(ENTRYPOINT)
            async def bench(job: Job) -> None:
                assert job.payload is not None
                i = int(json.loads(job.payload)["i"])
                tally.on_start(i)
                tally.on_end(i)

            yield manager
        finally:
            await connection.close()

    return create


async def _run_worker(url: str, tally: Tally) -> None:
    """Run the worker until `tally.done` is set: by the Nth handler run, or SIGTERM/SIGINT.

    Setting the shutdown event is PgQueuer's graceful stop: the QueueManager stops dequeuing,
    waits for the jobs in flight, and flushes its buffered completions before returning.
    """
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, tally.done.set)
    await pgqueuer.run(
        _factory(url, tally),
        batch_size=BATCH_SIZE,
        dequeue_timeout=DEQUEUE_TIMEOUT,
        max_concurrent_tasks=MAX_CONCURRENT_TASKS,
        shutdown=tally.done,
    )


def work(url: str, count: int) -> None:
    tally = Tally(count)
    uvloop.run(_run_worker(url, tally))
    tally.emit_work(CONFIG)


def latency(url: str, count: int) -> None:
    tally = Tally(count, report_each=True)
    uvloop.run(_run_worker(url, tally))
    emit({"runs": tally.runs})


def idle(url: str) -> None:
    uvloop.run(_run_worker(url, Tally(None)))
    emit({"ok": True})


# -- produce -----------------------------------------------------------------------------------


async def _produce(url: str, start: int) -> None:
    connection, queries = await _queries(url)
    next_i = start
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            words = line.split()
            if words == ["one"]:
                await queries.enqueue(ENTRYPOINT, _payload(next_i))
                emit({"i": next_i, "committed": time.time()})
                next_i += 1
            elif len(words) == 3 and words[0] == "rate":

                async def bulk(lo: int, hi: int) -> None:
                    await _enqueue_bulk(queries, lo, hi)

                sent = await enqueue_at_rate(bulk, next_i, float(words[1]), float(words[2]))
                next_i += sent
                emit({"enqueued": sent})
    finally:
        await connection.close()


def produce(url: str, start: int) -> None:
    asyncio.run(_produce(url, start))


# -- command line ------------------------------------------------------------------------------


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    main(Actions(setup, enqueue, work, latency, produce, idle), __doc__)
