"""The seven measurements, each on a fresh database, each driving a system only through its
command (bench/CONTRACT.md), so every system is measured the same way."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

import psycopg

from harness import pg
from harness.systems import System


class SystemFailed(RuntimeError):
    pass


def _last_json(output: str, what: str) -> dict[str, Any]:
    for line in reversed(output.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            answer: dict[str, Any] = json.loads(line)
            return answer
    raise SystemFailed(f"{what}: no JSON answer in {output[-500:]!r}")


def run_action(
    system: System, url: str, action: str, *options: str, timeout: float = 3600
) -> dict[str, Any]:
    done = subprocess.run(
        [*system.command, action, "--database-url", url, *options],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise SystemFailed(
            f"{system.name} {action} exited {done.returncode}: {done.stderr[-2000:]}"
        )
    return _last_json(done.stdout, f"{system.name} {action}")


@contextmanager
def started(
    system: System, url: str, action: str, *options: str
) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [*system.command, action, "--database-url", url, *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read_json_line(stream: IO[str], what: str) -> dict[str, Any]:
    while True:
        line = stream.readline()
        if not line:
            raise SystemFailed(f"{what}: the process ended early")
        if line.startswith("{"):
            answer: dict[str, Any] = json.loads(line)
            return answer


def _fresh(system: System) -> tuple[str, str]:
    database = f"bench_{system.name.replace('-', '_')}"
    url = pg.fresh_database(database)
    run_action(system, url, "setup")
    return database, url


# -- 1. enqueue ------------------------------------------------------------------------------


def enqueue_rate(system: System, mode: str, count: int) -> float:
    _database, url = _fresh(system)
    answer = run_action(system, url, "enqueue", "--count", str(count), "--mode", mode)
    return count / float(answer["seconds"])


# -- 2 and 7. burn-down and worker memory -----------------------------------------------------


@dataclass
class BurnDown:
    jobs_per_second: float
    runs: int
    unique: int
    peak_rss_kb: int
    config: str


def burn_down(system: System, count: int) -> BurnDown:
    _database, url = _fresh(system)
    run_action(system, url, "enqueue", "--count", str(count), "--mode", "bulk")
    answer = run_action(system, url, "work", "--count", str(count))
    if answer["runs"] != count or answer["unique"] != count:
        raise SystemFailed(
            f"{system.name}: {answer['runs']} handler runs for {answer['unique']} distinct jobs of "
            f"{count}: a job was lost or ran twice"
        )
    elapsed = float(answer["last_end"]) - float(answer["first_start"])
    return BurnDown(
        count / elapsed,
        answer["runs"],
        answer["unique"],
        int(answer["peak_rss_kb"]),
        answer["config"],
    )


# -- 3. steady state ---------------------------------------------------------------------------


@dataclass
class Steady:
    offered_rate: float
    jobs_per_second: float
    depth: list[int] = field(default_factory=list)


def steady_state(system: System, rate: float, seconds: float) -> Steady:
    _database, url = _fresh(system)
    expected = int(rate * seconds)
    depth: list[int] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(1.0):
            depth.append(int(pg.scalar(url, system.depth_sql)))

    with started(system, url, "work", "--count", str(expected)) as worker:
        time.sleep(2.0)  # the worker starts before the producer does
        with started(system, url, "produce") as producer:
            assert producer.stdin is not None
            assert producer.stdout is not None
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            producer.stdin.write(f"rate {rate} {seconds}\n")
            producer.stdin.flush()
            produced = _read_json_line(producer.stdout, f"{system.name} produce")
            producer.stdin.close()
        if produced["enqueued"] < expected:
            stop_sampling.set()
            raise SystemFailed(f"{system.name}: the producer fell behind ({produced['enqueued']})")
        assert worker.stdout is not None
        # the worker stops once it has run every job it was told to expect
        out, _ = worker.communicate(timeout=seconds * 5 + 60)
        stop_sampling.set()
        sampler.join()
    answer = _last_json(out, f"{system.name} work")
    elapsed = float(answer["last_end"]) - float(answer["first_start"])
    return Steady(rate, answer["runs"] / elapsed, depth)


# -- 4. pickup latency -------------------------------------------------------------------------


def pickup_latency(system: System, samples: int, *, url: str | None = None) -> list[float]:
    """Milliseconds from an enqueue's commit (another process) to the handler's start."""
    if url is None:
        _database, url = _fresh(system)
    latencies: list[float] = []
    with started(system, url, "latency", "--count", str(samples)) as worker:
        time.sleep(3.0)  # let the worker reach its idle wait
        with started(system, url, "produce", "--start", "0") as producer:
            assert producer.stdin is not None
            assert producer.stdout is not None
            assert worker.stdout is not None
            for _ in range(samples):
                producer.stdin.write("one\n")
                producer.stdin.flush()
                committed = _read_json_line(producer.stdout, f"{system.name} produce")
                started_at = _read_json_line(worker.stdout, f"{system.name} latency")
                if started_at["i"] != committed["i"]:
                    raise SystemFailed(f"{system.name}: job {committed['i']} ran as {started_at}")
                latencies.append(
                    (float(started_at["started"]) - float(committed["committed"])) * 1000
                )
                time.sleep(0.05)  # the worker goes idle again between samples
            producer.stdin.close()
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(round(fraction * (len(ordered) - 1)), len(ordered) - 1)
    return ordered[index]


# -- 5. idle cost ------------------------------------------------------------------------------


def idle_statements_per_minute(system: System, seconds: float) -> float:
    database, url = _fresh(system)
    with started(system, url, "idle"):
        time.sleep(5.0)  # past start-up: its one-off statements are not idle cost
        pg.reset_statements()
        time.sleep(seconds)
        count = pg.statements_in(database)
    return count * 60.0 / seconds


# -- 6. table health after many jobs -----------------------------------------------------------


@dataclass
class Health:
    jobs: int
    table_bytes: int
    index_bytes: int
    dead_tuples: int
    latency_p50_start_ms: float
    latency_p50_after_ms: float


def table_health(system: System, total: int, chunk: int, samples: int) -> Health:
    _database, url = _fresh(system)
    at_start = statistics.median(pickup_latency(system, samples, url=url))
    start = 10_000_000  # clear of the latency samples' numbers
    for first in range(start, start + total, chunk):
        size = min(chunk, start + total - first)
        run_action(
            system, url, "enqueue", "--count", str(size), "--mode", "bulk", "--start", str(first)
        )
        run_action(system, url, "work", "--count", str(size))
    health = pg.table_health(url, system.schema, system.table_like)
    after = statistics.median(_latency_after(system, url, samples))
    return Health(
        total, health["table_bytes"], health["index_bytes"], health["dead_tuples"], at_start, after
    )


def _latency_after(system: System, url: str, samples: int) -> list[float]:
    # the producer numbers from 0 again: a system that keys on i must not see a live duplicate,
    # and the start-of-run samples have all finished
    return pickup_latency(system, samples, url=url)


# -- 8. a held xmin horizon ---------------------------------------------------------------------


@dataclass
class Horizon:
    held: bool
    chunk_rates: list[float]
    latency_p50_after_ms: float


def held_horizon(system: System, total: int, chunk: int, samples: int, *, held: bool) -> Horizon:
    """Chunks of jobs enqueued and burned down one after another, then pickup latency; with
    `held`, another session keeps one repeatable-read snapshot open from the first chunk to the
    last (a long report, or a session idle in transaction), so no vacuum may remove what the
    finished jobs leave behind and every claim may have to walk it."""
    _database, url = _fresh(system)
    holder = psycopg.connect(url)
    try:
        if held:
            holder.execute("set transaction isolation level repeatable read")
            holder.execute("select count(*) from pg_class")  # the snapshot is taken here
        rates: list[float] = []
        start = 10_000_000  # clear of the latency samples' numbers
        for first in range(start, start + total, chunk):
            size = min(chunk, start + total - first)
            enqueue = ("enqueue", "--count", str(size), "--mode", "bulk", "--start", str(first))
            run_action(system, url, *enqueue)
            answer = run_action(system, url, "work", "--count", str(size))
            rates.append(size / (float(answer["last_end"]) - float(answer["first_start"])))
        after = statistics.median(_latency_after(system, url, samples))
    finally:
        holder.close()
    return Horizon(held, rates, after)


# -- 9. the soak: a million jobs through one worker, sampled every 10 s --------------------------


@dataclass
class SoakSample:
    seconds: float
    done: int
    jobs_per_second: float
    wait_p50_ms: float | None
    wait_p99_ms: float | None
    depth: int
    live_table_bytes: int  # jobs.jobs_live: what the claim reads, the size of the backlog
    live_index_bytes: int
    table_bytes: int  # every table of the schema, the history of done jobs with them
    index_bytes: int
    dead_tuples: int


@dataclass
class Soak:
    total: int
    rate: float
    samples: list[SoakSample]
    enqueued: int


# durajobs' own tables (the soak is durajobs'): the jobs done so far, and the wait from enqueue
# (or run_at) to claim of the jobs enqueued in the last window, finished or running
_SOAK_DONE = "select count(*) from jobs.jobs_history where state = 'done'"
_SOAK_LIVE = (
    "select pg_table_size('jobs.jobs_live'::regclass), pg_indexes_size('jobs.jobs_live'::regclass)"
)
_SOAK_WAIT = (
    "select percentile_cont(array[0.5, 0.99]) within group (order by"
    "       extract(epoch from claimed_at - greatest(run_at, created_at)) * 1000)"
    "  from jobs.jobs where queue = 'bench' and created_at > now() - %s * interval '1 second'"
    "   and claimed_at is not null"
)


def soak(system: System, total: int, rate: float, every: float = 10.0) -> Soak:
    """`total` jobs offered at `rate` a second while one worker drains them: throughput, the
    wait to be claimed, the backlog, table and index sizes and dead tuples every `every` s."""
    _database, url = _fresh(system)
    samples: list[SoakSample] = []
    stop_sampling = threading.Event()
    began = time.monotonic()

    def sample() -> None:
        last_done, last_at = 0, began
        while not stop_sampling.wait(every):
            with psycopg.connect(url, autocommit=True) as connection:
                done = int(connection.execute(_SOAK_DONE).fetchone()[0])
                waits = connection.execute(_SOAK_WAIT, [every]).fetchone()[0]
                depth = int(connection.execute(system.depth_sql).fetchone()[0])
                live_table, live_index = connection.execute(_SOAK_LIVE).fetchone()
            health = pg.table_health(url, system.schema, system.table_like)
            now = time.monotonic()
            samples.append(
                SoakSample(
                    now - began,
                    done,
                    (done - last_done) / (now - last_at),
                    None if not waits else waits[0],
                    None if not waits else waits[1],
                    depth,
                    int(live_table),
                    int(live_index),
                    health["table_bytes"],
                    health["index_bytes"],
                    health["dead_tuples"],
                )
            )
            last_done, last_at = done, now

    seconds = total / rate
    with started(system, url, "work", "--count", str(total)) as worker:
        time.sleep(2.0)  # the worker starts before the producer does
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with started(system, url, "produce", "--start", "0") as producer:
            assert producer.stdin is not None
            assert producer.stdout is not None
            producer.stdin.write(f"rate {rate} {seconds}\n")
            producer.stdin.flush()
            produced = _read_json_line(producer.stdout, f"{system.name} produce")
            producer.stdin.close()
        enqueued = int(produced["enqueued"])
        try:
            if enqueued == total:
                worker.communicate(timeout=seconds + 600)
            else:  # the producer fell behind: the worker would wait for jobs never sent
                deadline = time.monotonic() + 600
                while int(pg.scalar(url, system.depth_sql)) and time.monotonic() < deadline:
                    time.sleep(1.0)
        finally:
            stop_sampling.set()
            sampler.join()
    return Soak(total, rate, samples, enqueued)
