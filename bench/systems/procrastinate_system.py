"""Procrastinate under the benchmark contract (bench/CONTRACT.md).

Run as `python bench/systems/procrastinate_system.py <action> --database-url URL [options]`.

One task, `bench`, on the queue `bench`, taking `i` as its keyword argument. The connector is
procrastinate's PsycopgConnector (psycopg 3 and its async pool). The worker is
`App.run_worker_async` run as an asyncio task and stopped the documented way, by cancelling that
task (docs/howto/basics/worker.md, docs/howto/advanced/shutdown.md): the worker then stops
fetching, waits for the jobs in flight to finish and unregisters itself.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from importlib.metadata import version
from typing import Any

import procrastinate
from contract import Actions, Tally, emit, enqueue_at_rate, main
from procrastinate.types import JSONDict

QUEUE = "bench"
TASK = "bench"
BULK_BATCH = 1000

# Concurrent sub-workers in the one worker process (docs/howto/concurrency.md, "Execute
# multiple jobs at the same time", whose example is 30): the jobs are async no-ops, so this only
# overlaps the fetch and finish round trips. Burning down 4,000 jobs on a shared 2-core box,
# 20 averaged ~530 jobs/s over four runs against ~410 for 10, and 30 did worse (~260).
CONCURRENCY = 20
# docs/discussions.md, "Mind the size of your PostgreSQL pool": the shorter the jobs, the more
# the pool needs "as many connections as your concurrency (plus one)"; the LISTEN connection is
# outside the pool. min_size = max_size so every connection is open before the first job.
POOL_SIZE = CONCURRENCY + 1
# The rest are run_worker_async's defaults: LISTEN/NOTIFY on, 5 s fallback poll, finished jobs
# kept (delete_jobs="never"), no graceful-shutdown timeout. Logging stays at WARNING (the CLI
# would log two INFO lines per job).
WORKER_OPTIONS: dict[str, Any] = {
    "queues": [QUEUE],
    "concurrency": CONCURRENCY,
    "listen_notify": True,
    "fetch_job_polling_interval": 5.0,
    "delete_jobs": "never",
}
CONFIG = (
    f"procrastinate {version('procrastinate')}: one worker, App.run_worker_async("
    + ", ".join(f"{key}={value!r}" for key, value in WORKER_OPTIONS.items())
    + f"), PsycopgConnector(min_size={POOL_SIZE}, max_size={POOL_SIZE}) + 1 LISTEN connection, "
    "asyncio loop, logging at WARNING"
)


def _app(url: str, pool_size: int, tally: Tally | None = None) -> procrastinate.App:
    """The App with its one task; the pool opens `pool_size` connections up front."""
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=pool_size, max_size=pool_size
        )
    )

    @app.task(name=TASK, queue=QUEUE)
    async def bench(i: int) -> None:
        if tally is not None:
            tally.on_start(i)
            tally.on_end(i)

    return app


# -- setup -------------------------------------------------------------------------------------


async def _setup(url: str) -> None:
    # What `procrastinate schema --apply` runs.
    app = _app(url, pool_size=1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def setup(url: str) -> None:
    asyncio.run(_setup(url))
    emit({"ok": True})


# -- enqueue -----------------------------------------------------------------------------------


async def _defer_bulk(task: procrastinate.tasks.Task[..., Any, Any], first: int, last: int) -> None:
    """Defer jobs i = first .. last-1 with the bulk API: Task.batch_defer_async
    (docs/howto/basics/batch_defer.md), one procrastinate_defer_jobs_v1 call, one transaction."""
    batch: list[JSONDict] = [{"i": i} for i in range(first, last)]
    await task.batch_defer_async(*batch)


async def _enqueue(url: str, count: int, mode: str, start: int) -> float:
    app = _app(url, pool_size=1)
    task = app.tasks[TASK]
    async with app.open_async():  # opens the pool's one connection before the clock starts
        began = time.perf_counter()
        if mode == "single":
            # Task.defer_async: one procrastinate_defer_jobs_v1 call, its own transaction.
            for i in range(start, start + count):
                await task.defer_async(i=i)
        else:
            for first in range(start, start + count, BULK_BATCH):
                await _defer_bulk(task, first, min(first + BULK_BATCH, start + count))
        return time.perf_counter() - began


def enqueue(url: str, count: int, mode: str, start: int) -> None:
    seconds = asyncio.run(_enqueue(url, count, mode, start))
    emit({"seconds": seconds})


# -- the worker (work, latency, idle) ------------------------------------------------------------


async def _run_worker(url: str, tally: Tally) -> None:
    """Run the worker until `tally.done` is set: by the Nth handler run, or SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, tally.done.set)
    app = _app(url, POOL_SIZE, tally)
    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(install_signal_handlers=False, **WORKER_OPTIONS)
        )
        done = asyncio.create_task(tally.done.wait())
        await asyncio.wait({worker, done}, return_when=asyncio.FIRST_COMPLETED)
        # The documented graceful stop: cancel the worker task, then wait for it to wind down.
        worker.cancel()
        done.cancel()
        await asyncio.wait({worker})
        if not worker.cancelled() and (error := worker.exception()) is not None:
            raise error


def work(url: str, count: int) -> None:
    tally = Tally(count)
    asyncio.run(_run_worker(url, tally))
    tally.emit_work(CONFIG)


def latency(url: str, count: int) -> None:
    tally = Tally(count, report_each=True)
    asyncio.run(_run_worker(url, tally))
    emit({"runs": tally.runs})


def idle(url: str) -> None:
    asyncio.run(_run_worker(url, Tally(None)))
    emit({"ok": True})


# -- produce -----------------------------------------------------------------------------------


async def _produce(url: str, start: int) -> None:
    app = _app(url, pool_size=1)
    task = app.tasks[TASK]
    next_i = start
    async with app.open_async():
        while line := await asyncio.to_thread(sys.stdin.readline):
            words = line.split()
            if words == ["one"]:
                await task.defer_async(i=next_i)
                emit({"i": next_i, "committed": time.time()})
                next_i += 1
            elif len(words) == 3 and words[0] == "rate":

                async def bulk(lo: int, hi: int) -> None:
                    await _defer_bulk(task, lo, hi)

                sent = await enqueue_at_rate(bulk, next_i, float(words[1]), float(words[2]))
                next_i += sent
                emit({"enqueued": sent})


def produce(url: str, start: int) -> None:
    asyncio.run(_produce(url, start))


# -- command line ------------------------------------------------------------------------------


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    # The App is built in this script, which runs as __main__; procrastinate warns about that
    # for apps whose tasks live in other modules, which is not the case here.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    main(Actions(setup, enqueue, work, latency, produce, idle), __doc__)
