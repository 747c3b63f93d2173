"""durajobs under the benchmark contract (bench/CONTRACT.md).

Run as `python bench/systems/durajobs_system.py <action> --database-url URL [options]`.
The worker configuration measured is WORKER_CONFIG: the one a 2-core deployment would run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

from pydantic import BaseModel

import durajobs
from durajobs.worker import Worker

QUEUE = "bench"
BATCH = 1000
WORKER_CONFIG: dict[str, Any] = {"concurrency": 50, "listen": True}


class Payload(BaseModel):
    i: int


def _registry(url: str, on_run: Any) -> durajobs.Registry:
    registry = durajobs.Registry(database_url=url)

    @registry.job(
        name="noop", input=Payload, queue=QUEUE, idempotency_key=lambda p: str(p.i), tenant="none"
    )
    async def noop(ctx: durajobs.JobContext[Payload]) -> None:
        on_run(ctx.input.i)

    return registry


def _emit(document: dict[str, Any]) -> None:
    print(json.dumps(document), flush=True)


def _peak_rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def setup(url: str) -> None:
    durajobs.migrate(url)
    _emit({"ok": True})


def enqueue(url: str, count: int, mode: str, start: int) -> None:
    registry = _registry(url, lambda _i: None)
    job = registry.get("noop")
    assert job is not None
    with durajobs.Client.connect(url) as client:
        began = time.perf_counter()
        if mode == "single":
            for i in range(start, start + count):
                job.enqueue({"i": i}, using=client)
        else:
            for first in range(start, start + count, BATCH):
                last = min(first + BATCH, start + count)
                client.enqueue_many(
                    [
                        {
                            "name": "noop",
                            "queue": QUEUE,
                            "input": {"i": i},
                            "idempotency_key": str(i),
                        }
                        for i in range(first, last)
                    ]
                )
        _emit({"seconds": time.perf_counter() - began})


class _Tally:
    def __init__(self, count: int, *, report_each: bool = False) -> None:
        self.count = count
        self.seen: set[int] = set()
        self.runs = 0
        self.first_start: float | None = None
        self.last_end = 0.0
        self.report_each = report_each
        self.done = asyncio.Event()

    def on_run(self, i: int) -> None:
        now = time.time()
        if self.first_start is None:
            self.first_start = now
        if self.report_each:
            _emit({"i": i, "started": now})
        self.runs += 1
        self.seen.add(i)
        self.last_end = time.time()
        if self.runs >= self.count:
            self.done.set()


async def _work_until(url: str, tally: _Tally) -> None:
    worker = Worker(_registry(url, tally.on_run), url, queues=[QUEUE], **WORKER_CONFIG)
    runner = asyncio.ensure_future(worker.run())
    stopper = asyncio.ensure_future(tally.done.wait())
    await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
    worker.stop()
    await runner


def work(url: str, count: int) -> None:
    tally = _Tally(count)
    asyncio.run(_work_until(url, tally))
    _emit(
        {
            "runs": tally.runs,
            "unique": len(tally.seen),
            "first_start": tally.first_start,
            "last_end": tally.last_end,
            "peak_rss_kb": _peak_rss_kb(),
            "config": f"Worker({', '.join(f'{k}={v!r}' for k, v in WORKER_CONFIG.items())})",
        }
    )


def latency(url: str, count: int) -> None:
    tally = _Tally(count, report_each=True)
    asyncio.run(_work_until(url, tally))
    _emit({"runs": tally.runs})


def produce(url: str, start: int) -> None:
    registry = _registry(url, lambda _i: None)
    job = registry.get("noop")
    assert job is not None
    next_i = start
    with durajobs.Client.connect(url) as client:
        for line in sys.stdin:
            words = line.split()
            if words == ["one"]:
                job.enqueue({"i": next_i}, using=client)
                _emit({"i": next_i, "committed": time.time()})
                next_i += 1
            elif words and words[0] == "rate":
                rate, seconds = float(words[1]), float(words[2])
                sent = _enqueue_at_rate(client, next_i, rate, seconds)
                next_i += sent
                _emit({"enqueued": sent})


TICK = 0.01
GRACE = 0.1


def _enqueue_at_rate(client: durajobs.Client, first: int, rate: float, seconds: float) -> int:
    """Enqueue int(rate * seconds) jobs, job k due k / rate seconds after the start, paced in
    10 ms ticks: each tick enqueues every job due by then in ONE enqueue_many (one transaction).
    Gives up GRACE after `seconds` if still behind; answers how many it enqueued."""
    total = int(rate * seconds)
    began = time.perf_counter()
    sent = 0
    while sent < total:
        elapsed = time.perf_counter() - began
        if elapsed > seconds + GRACE:
            break
        due = min(total, int(elapsed * rate) + 1)
        if due > sent:
            client.enqueue_many(
                [
                    {"name": "noop", "queue": QUEUE, "input": {"i": i}, "idempotency_key": str(i)}
                    for i in range(first + sent, first + due)
                ]
            )
            sent = due
        time.sleep(max(TICK - (time.perf_counter() - began) % TICK, 0))
    return sent


def idle(url: str) -> None:
    async def run() -> None:
        worker = Worker(_registry(url, lambda _i: None), url, queues=[QUEUE], **WORKER_CONFIG)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()

    asyncio.run(run())
    _emit({"ok": True})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "action", choices=["setup", "enqueue", "work", "latency", "produce", "idle"]
    )
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--mode", choices=["single", "bulk"], default="single")
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args()
    url = args.database_url
    if args.action == "setup":
        setup(url)
    elif args.action == "enqueue":
        enqueue(url, args.count, args.mode, args.start)
    elif args.action == "work":
        work(url, args.count)
    elif args.action == "latency":
        latency(url, args.count)
    elif args.action == "produce":
        produce(url, args.start)
    else:
        idle(url)


if __name__ == "__main__":
    main()
