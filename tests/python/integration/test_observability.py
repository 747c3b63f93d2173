"""What a worker tells operators: progress, its registry row, the counters it moves, and the
Prometheus series it serves. Real workers on a real database (a progress report refused before
the SQL: unit/test_value_checks; settles racing on the counters: concurrency/test_counter_shards).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from datetime import timedelta

import pytest

import durajobs
from durajobs._db import calls
from durajobs.declare.retry import RetryPolicy
from durajobs.display.inspection import job_detail
from durajobs.runtime.attempt import JobContext
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import Item
from support.rows import fetch_all
from support.running import run_until


class Reporting(Item):
    """An Item that tells the body how many progress reports to make, or to fail."""

    reports: int = 0
    fail: bool = False


def _counting(worker: Worker, function: str) -> list[str]:
    """Record every call of `function` the worker sends."""
    seen: list[str] = []
    real_run = worker.db.run

    async def counting(call):
        if call.function == function:
            seen.append(call.function)
        return await real_run(call)

    worker.db.run = counting  # type: ignore[method-assign]
    return seen


def _state(database_url, key):
    rows = fetch_all(database_url, "select state from jobs.jobs where idempotency_key = %s", [key])
    return rows[0][0] if rows else None


# -- progress --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_progress_is_throttled_and_its_last_report_lands_before_the_settle(database_url, kind):
    registry = durajobs.Registry(database_url=database_url)

    if kind == "async":

        @declare(registry, "loop", input=Reporting)
        async def loop_async(ctx: JobContext[Reporting]) -> None:
            for done in range(1, ctx.input.reports + 1):
                ctx.progress(done, ctx.input.reports, f"row {done}")
                await asyncio.sleep(0.05)

    else:

        @declare(registry, "loop", input=Reporting)
        def loop_sync(ctx) -> None:
            for done in range(1, ctx.input.reports + 1):
                ctx.progress(done, ctx.input.reports, f"row {done}")
                time.sleep(0.05)

    registry.get("loop").enqueue({"key": "p", "reports": 40})  # about two seconds of reports
    worker = Worker(registry, database_url, listen=False)
    writes = _counting(worker, "jobs.progress_v1")
    asyncio.run(run_until(worker, lambda: _state(database_url, "p") == "done"))

    [(progress,)] = fetch_all(
        database_url, "select progress from jobs.jobs where idempotency_key='p'"
    )
    assert (progress["done"], progress["total"], progress["note"]) == (40, 40, "row 40")
    # one a second at most, plus the last: 40 reports over ~2 s are a handful of writes
    assert 2 <= len(writes) <= 5, writes


def test_progress_of_an_attempt_that_lost_its_row_is_not_written(database_url):
    """Fenced on the claim: a stale attempt reports nothing on the attempt that replaced it."""
    with durajobs.Client.connect(database_url) as client:
        client.enqueue("j", {}, "k")
        [old] = client.claim(["default"], "w1", visibility=timedelta(milliseconds=1))
        assert old.lease_expires_at is not None
        past_the_lease = old.lease_expires_at + timedelta(seconds=1)
        client.connection.execute(
            "select set_config('durajobs.now', %s, false)", [past_the_lease.isoformat()]
        )
        [new] = client.claim(["default"], "w2")
        assert old.id == new.id
        assert old.claim != new.claim
        assert client.run(calls.progress(old.fence, 5, 10)) is False
        assert client.run(calls.progress(new.fence, 1, 10)) is True
    [(progress,)] = fetch_all(database_url, "select progress from jobs.jobs")
    assert progress["done"] == 1


# -- the workers registry --------------------------------------------------------------------


def test_a_running_worker_is_listed_with_what_it_holds_and_forgotten_when_it_stops(database_url):
    registry = durajobs.Registry(database_url=database_url)
    release = asyncio.Event()

    @declare(registry, "hold", input=Reporting)
    async def hold(ctx) -> None:
        await release.wait()

    job_id = registry.get("hold").enqueue({"key": "h"}).id
    worker = Worker(
        registry, database_url, listen=False, concurrency=3, visibility=timedelta(seconds=1.5)
    )
    seen = {}

    def listed() -> bool:
        with durajobs.Client.connect(database_url) as client:
            rows = client.workers()
        if rows and rows[0].in_flight:
            seen["row"] = rows[0]
            release.set()
            return True
        return False

    asyncio.run(run_until(worker, listed))
    row = seen["row"]
    assert row.id == worker.worker_id
    assert (row.queues, row.slots, row.in_flight, row.in_flight_count) == (
        ["default"],
        3,
        [job_id],
        1,
    )
    assert row.draining_at is None
    assert row.expires_at - row.heartbeat_at == timedelta(seconds=1.5)
    with durajobs.Client.connect(database_url) as client:
        assert client.workers() == [], "a stopped worker forgets its row"


def test_a_draining_worker_is_marked_and_not_counted_in_the_queue_depth(database_url):
    registry = durajobs.Registry(database_url=database_url)
    started = asyncio.Event()

    @declare(registry, "slow", input=Reporting)
    def slow(ctx) -> None:
        started.set()
        time.sleep(1.0)  # a plain def ignores the cancel: the drain waits for it

    registry.get("slow").enqueue({"key": "s"})
    registry.get("slow").enqueue({"key": "waiting"}, delay=timedelta(hours=1))
    worker = Worker(registry, database_url, listen=False, concurrency=1)
    observed = {}

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        await asyncio.wait_for(started.wait(), 20)
        with durajobs.Client.connect(database_url) as client:
            observed["before"] = client.queue_depth()
        worker.drain()
        deadline = time.monotonic() + 10
        while True:
            with durajobs.Client.connect(database_url) as client:
                rows = client.workers()
                if rows and rows[0].draining_at is not None:
                    observed["row"] = rows[0]
                    observed["during"] = client.queue_depth()
                    break
            assert time.monotonic() < deadline, "the drain was never marked"
            await asyncio.sleep(0.02)
        await asyncio.wait_for(runner, 30)

    asyncio.run(scenario())
    [before] = observed["before"]
    assert (before.running, before.due, before.draining_held, before.depth) == (1, 0, 0, 1)
    [during] = observed["during"]
    assert (during.running, during.draining_held, during.depth) == (1, 1, 0)


# -- counters --------------------------------------------------------------------------------


def test_the_counters_move_with_what_the_worker_settles(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(
        registry,
        "work",
        input=Reporting,
        retry=RetryPolicy(attempts=2, delay=timedelta(milliseconds=10), jitter=False),
    )
    async def work(ctx) -> None:
        if ctx.input.fail:
            raise RuntimeError("always")
        if ctx.input.key == "sleeper" and ctx.attempt == 1:
            await ctx.step.sleep("nap", timedelta(milliseconds=10))

    job = registry.get("work")
    for key in ("a", "b", "c"):
        job.enqueue({"key": key})
    job.enqueue({"key": "bad", "fail": True})
    job.enqueue({"key": "sleeper"})
    worker = Worker(registry, database_url, listen=False)
    keys = ("a", "b", "c", "bad", "sleeper")
    finished = {"done", "dead"}
    asyncio.run(run_until(worker, lambda: all(_state(database_url, k) in finished for k in keys)))

    with durajobs.Client.connect(database_url) as client:
        [total] = client.counter_totals()
    # four completed; 'bad' retried once then dead; the sleeper's suspension added nothing
    assert (total.name, total.done, total.retried, total.failed, total.dead) == (
        "work",
        4,
        1,
        0,
        1,
    )


def test_an_interrupted_attempt_adds_nothing_to_the_counters(database_url):
    registry = durajobs.Registry(database_url=database_url)
    started = asyncio.Event()

    @declare(registry, "long", input=Reporting)
    async def long(ctx) -> None:
        started.set()
        await asyncio.sleep(30)

    registry.get("long").enqueue({"key": "l"})
    worker = Worker(registry, database_url, listen=False)

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        await asyncio.wait_for(started.wait(), 20)
        worker.drain()
        await asyncio.wait_for(runner, 30)

    asyncio.run(scenario())
    assert _state(database_url, "l") == "ready"
    assert fetch_all(database_url, "select count(*) from jobs.counter_buckets") == [(0,)]


# -- Prometheus ------------------------------------------------------------------------------


def test_the_worker_serves_its_series_and_the_queue_gauges(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "m", input=Reporting, retry=RetryPolicy(attempts=1))
    async def m(ctx) -> None:
        if ctx.input.fail:
            raise RuntimeError("no")

    registry.get("m").enqueue({"key": "ok"})
    registry.get("m").enqueue({"key": "bad", "fail": True})
    worker = Worker(registry, database_url, listen=False, metrics_port=0, metrics_host="127.0.0.1")
    scraped = {}

    def scraped_after_both() -> bool:
        # the worker counts an outcome once its settle returned, a moment after the row moved
        outcomes = worker.stats().outcomes
        if outcomes.get("completed") != 1 or outcomes.get("dead-lettered") != 1:
            return False
        url = f"http://127.0.0.1:{worker.metrics.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            scraped["text"] = answer.read().decode()
        return True

    asyncio.run(run_until(worker, scraped_after_both))
    text = scraped["text"]
    assert 'jobs_total{outcome="ok",queue="default"} 1.0' in text
    assert 'jobs_total{outcome="dead",queue="default"} 1.0' in text
    assert 'queue_dead_jobs{queue="default"} 1.0' in text
    assert 'queue_depth{queue="default"} 0.0' in text
    assert 'queue_oldest_ready_seconds{queue="default"} 0.0' in text
    assert "job_worker_capacity 8.0" in text
    assert "job_worker_in_flight 0.0" in text


def test_the_worker_gauges_sum_the_live_workers_of_the_process(database_url):
    registry = durajobs.Registry(database_url=database_url)
    started = asyncio.Event()
    release = asyncio.Event()

    @declare(registry, "hold", input=Reporting)
    async def hold(ctx) -> None:
        started.set()
        await release.wait()

    wide = Worker(registry, database_url, listen=False, concurrency=8, idle_ceiling=0.1)
    narrow = Worker(registry, database_url, listen=False, concurrency=3, idle_ceiling=0.1)
    seen: dict[str, float | None] = {}

    def both_listed() -> bool:
        with durajobs.Client.connect(database_url) as client:
            return len(client.workers()) == 2

    async def scenario() -> None:
        wide_run = asyncio.ensure_future(wide.run())
        narrow_run = asyncio.ensure_future(narrow.run())
        # a worker is listed after it joined the gauges: the job waits for both, or the first
        # up could run it before the second counts itself in
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(both_listed):
            assert time.monotonic() < deadline, "the workers never both started"
            await asyncio.sleep(0.02)
        await asyncio.to_thread(registry.get("hold").enqueue, {"key": "a"})
        await asyncio.wait_for(started.wait(), 20)
        seen["capacity, both"] = wide.metrics.sample("job_worker_capacity")
        seen["in flight, both"] = narrow.metrics.sample("job_worker_in_flight")
        # stop the worker not running the job: the sums drop by its capacity alone
        idle, busy, idle_run = (
            (narrow, wide, narrow_run) if wide.stats().in_flight else (wide, narrow, wide_run)
        )
        idle.stop()
        await asyncio.wait_for(idle_run, 20)
        seen["capacity, one"] = busy.metrics.sample("job_worker_capacity")
        seen["busy capacity"] = float(busy.capacity)
        seen["in flight, one"] = idle.metrics.sample("job_worker_in_flight")
        release.set()
        busy.stop()
        await asyncio.wait_for(asyncio.gather(wide_run, narrow_run), 20)
        seen["capacity, none"] = busy.metrics.sample("job_worker_capacity")

    asyncio.run(scenario())
    assert seen["capacity, both"] == 11.0
    assert seen["in flight, both"] == 1.0  # the job runs on one of them; each answers the sum
    assert seen["capacity, one"] == seen["busy capacity"]
    assert seen["in flight, one"] == 1.0
    assert seen["capacity, none"] == 0.0


def test_a_scrape_the_database_cannot_answer_still_serves_the_process_series(database_url):
    from durajobs.observe.metrics import WorkerMetrics

    metrics = WorkerMetrics(
        "postgresql://nobody@127.0.0.1:1/none",
        ["default"],
        in_flight=lambda: 2,
        capacity=lambda: 4,
    )
    metrics.observe("default", "completed")
    metrics.observe("default", "suspended")  # not counted
    metrics.observe("default", "lease-lost")
    assert metrics.sample("jobs_total", {"queue": "default", "outcome": "ok"}) == 1.0
    assert metrics.sample("job_leases_lost_total", {"queue": "default"}) == 1.0
    assert metrics.sample("job_worker_in_flight") == 0.0  # not running: not counted
    metrics.join()
    try:
        assert metrics.sample("job_worker_in_flight") == 2.0
        assert metrics.sample("job_worker_capacity") == 4.0
    finally:
        metrics.leave()
    assert metrics.sample("job_worker_capacity") == 0.0
    assert metrics.sample("queue_depth", {"queue": "default"}) is None


def test_the_json_document_of_a_job_carries_its_progress(database_url):
    """inspect_job is the one reader of a job's detail, progress included."""
    with durajobs.Client.connect(database_url) as client:
        client.enqueue("j", {"a": 1}, "k")
        [claimed] = client.claim(["default"], "w")
        client.run(calls.progress(claimed.fence, 2, 4, "half"))
        detail = job_detail(client.inspect_job(claimed.id))
    assert detail.job["progress"]["note"] == "half"
    assert json.loads(json.dumps(detail.as_json(), default=str))["job"]["input"] == {"a": 1}
    assert detail.retries_ahead is None  # no registry: the delays are not known here
