"""What the Python adapters share under bench/CONTRACT.md: the JSON lines, the handler's tally,
the paced producer, and the command line. Each adapter keeps only what is its system's own."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# the pacing of `produce`'s `rate R S` line, and how late past S it may still catch up
TICK = 0.01
GRACE = 1.0


def emit(document: dict[str, Any]) -> None:
    """Print one JSON line on stdout, flushed at once (the harness reads line by line)."""
    print(json.dumps(document), flush=True)


def peak_rss_kb() -> int:
    """The process's peak resident set size (VmHWM) in kB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Tally:
    """What the handler saw: how many runs, which `i`s, the first start and the last end."""

    def __init__(self, count: int | None, *, report_each: bool = False) -> None:
        self.count = count
        self.report_each = report_each
        self.runs = 0
        self.seen: set[int] = set()
        self.first_start: float | None = None
        self.last_end = 0.0
        # set once `count` runs are done (or by a signal, where the adapter wires one)
        self.done = asyncio.Event()

    def on_start(self, i: int) -> None:
        now = time.time()
        if self.first_start is None:
            self.first_start = now
        if self.report_each:
            emit({"i": i, "started": now})

    def on_end(self, i: int) -> None:
        self.runs += 1
        self.seen.add(i)
        self.last_end = time.time()
        if self.count is not None and self.runs >= self.count:
            self.done.set()

    def emit_work(self, config: str) -> None:
        """The `work` action's answer."""
        emit(
            {
                "runs": self.runs,
                "unique": len(self.seen),
                "first_start": self.first_start,
                "last_end": self.last_end,
                "peak_rss_kb": peak_rss_kb(),
                "config": config,
            }
        )


async def enqueue_at_rate(
    enqueue_range: Callable[[int, int], Awaitable[object]],
    first: int,
    rate: float,
    seconds: float,
) -> int:
    """Enqueue int(R * S) jobs numbered from `first`, job k due k / R seconds after the start.

    Paced in 10 ms ticks: each tick enqueues every job due by then in ONE `enqueue_range(lo, hi)`
    call (jobs lo .. hi-1 through the bulk API, so one transaction per tick); a tick that
    overruns is caught up by the next one. A producer still owing jobs GRACE after S gives up,
    so the count it returns shows that it fell behind. Returns how many it enqueued.
    """
    total = int(rate * seconds)
    began = time.perf_counter()
    sent = 0
    while sent < total:
        elapsed = time.perf_counter() - began
        if elapsed > seconds + GRACE:
            break
        due = min(total, int(elapsed * rate) + 1)
        if due > sent:
            await enqueue_range(first + sent, first + due)
            sent = due
        if sent < total:
            await asyncio.sleep(TICK - (time.perf_counter() - began) % TICK)
    return sent


@dataclass(frozen=True)
class Actions:
    """One adapter's implementation of each action."""

    setup: Callable[[str], None]
    enqueue: Callable[[str, int, str, int], None]
    work: Callable[[str, int], None]
    latency: Callable[[str, int], None]
    produce: Callable[[str, int], None]
    idle: Callable[[str], None]


def main(actions: Actions, description: str | None) -> None:
    """Parse the contract's command line and run the action it names."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "action", choices=["setup", "enqueue", "work", "latency", "produce", "idle"]
    )
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--mode", choices=["single", "bulk"], default="single")
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args()
    url: str = args.database_url
    if args.action == "setup":
        actions.setup(url)
    elif args.action == "enqueue":
        actions.enqueue(url, args.count, args.mode, args.start)
    elif args.action == "work":
        actions.work(url, args.count)
    elif args.action == "latency":
        actions.latency(url, args.count)
    elif args.action == "produce":
        actions.produce(url, args.start)
    else:
        actions.idle(url)
    sys.stdout.flush()
