"""durajobs under the benchmark contract (bench/CONTRACT.md).

Run as `python bench/systems/durajobs_system.py <action> --database-url URL [options]`.
The worker configuration measured is WORKER_CONFIG: the one a 2-core deployment would run.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import Any

from contract import Actions, Tally, emit, enqueue_at_rate, main
from pydantic import BaseModel

import durajobs
from durajobs.runtime.loop import run as run_loop
from durajobs.runtime.worker import Worker

QUEUE = "bench"
BATCH = 1000
WORKER_CONFIG: dict[str, Any] = {"concurrency": 1000, "listen": True, "freeze_gc": True}
CONFIG = f"Worker({', '.join(f'{k}={v!r}' for k, v in WORKER_CONFIG.items())})"


class Payload(BaseModel):
    i: int


def _registry(url: str, tally: Tally | None = None) -> durajobs.Registry:
    registry = durajobs.Registry(database_url=url)

    @registry.job(
        name="noop", input=Payload, queue=QUEUE, idempotency_key=lambda p: str(p.i), tenant="none"
    )
    async def noop(ctx: durajobs.JobContext[Payload]) -> None:
        if tally is not None:
            tally.on_start(ctx.input.i)
            tally.on_end(ctx.input.i)

    return registry


def _requests(first: int, last: int) -> list[dict[str, Any]]:
    return [
        {"name": "noop", "queue": QUEUE, "input": {"i": i}, "idempotency_key": str(i)}
        for i in range(first, last)
    ]


def setup(url: str) -> None:
    durajobs.migrate(url)
    emit({"ok": True})


def enqueue(url: str, count: int, mode: str, start: int) -> None:
    job = _registry(url).get("noop")
    assert job is not None
    with durajobs.Client.connect(url) as client:
        began = time.perf_counter()
        if mode == "single":
            for i in range(start, start + count):
                job.enqueue({"i": i}, using=client)
        else:
            for first in range(start, start + count, BATCH):
                client.enqueue_many(_requests(first, min(first + BATCH, start + count)))
        emit({"seconds": time.perf_counter() - began})


async def _run_worker(url: str, tally: Tally) -> None:
    """Run a worker until `tally.done` is set: by the Nth handler run, or SIGTERM."""
    worker = Worker(_registry(url, tally), url, queues=[QUEUE], **WORKER_CONFIG)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, tally.done.set)
    runner = asyncio.ensure_future(worker.run())
    stopper = asyncio.ensure_future(tally.done.wait())
    await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    worker.stop()
    stopper.cancel()
    await runner


def work(url: str, count: int) -> None:
    tally = Tally(count)
    run_loop(_run_worker(url, tally))
    tally.emit_work(CONFIG)


def latency(url: str, count: int) -> None:
    tally = Tally(count, report_each=True)
    run_loop(_run_worker(url, tally))
    emit({"runs": tally.runs})


def idle(url: str) -> None:
    run_loop(_run_worker(url, Tally(None)))
    emit({"ok": True})


def produce(url: str, start: int) -> None:
    job = _registry(url).get("noop")
    assert job is not None
    next_i = start
    with durajobs.Client.connect(url) as client:

        async def bulk(lo: int, hi: int) -> None:
            client.enqueue_many(_requests(lo, hi))  # the loop has nothing else to run meanwhile

        for line in sys.stdin:
            words = line.split()
            if words == ["one"]:
                job.enqueue({"i": next_i}, using=client)
                emit({"i": next_i, "committed": time.time()})
                next_i += 1
            elif len(words) == 3 and words[0] == "rate":
                sent = asyncio.run(enqueue_at_rate(bulk, next_i, float(words[1]), float(words[2])))
                next_i += sent
                emit({"enqueued": sent})


if __name__ == "__main__":
    main(Actions(setup, enqueue, work, latency, produce, idle), __doc__)
