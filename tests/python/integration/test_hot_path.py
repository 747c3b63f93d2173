"""The worker's hot path: an attempt leaves nothing for the cycle collector, and a worker that
owns its process takes what it started with out of the collector's walks."""

from __future__ import annotations

import asyncio
import gc

import psycopg

import durajobs
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import Numbered
from support.running import run_until

JOBS = 2000
# a run leaves some cycles whatever its length: about 70 objects for each pooled connection
# closed at its stop (psycopg's), two to four of them. A cycle each attempt made would leave at
# least JOBS objects, twice this bound
LEFT_BY_A_RUN = JOBS // 2


def _by_n(item: Numbered) -> str:
    return str(item.n)


def _registry(database_url: str, seen: list[int]) -> durajobs.Registry:
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "quick", input=Numbered, idempotency_key=_by_n)
    async def quick(ctx: durajobs.JobContext[Numbered]) -> None:
        seen.append(ctx.input.n)

    @declare(registry, "quick-sync", input=Numbered, idempotency_key=_by_n)
    def quick_sync(ctx: durajobs.SyncJobContext[Numbered]) -> None:
        seen.append(ctx.input.n)

    return registry


def _enqueue(database_url: str, name: str, count: int) -> None:
    with durajobs.Client.connect(database_url) as client:
        client.enqueue_many(
            [{"name": name, "input": {"n": n}, "idempotency_key": str(n)} for n in range(count)]
        )


def _garbage_after_run(database_url: str, name: str) -> tuple[int, list[int]]:
    """Run JOBS attempts of `name` with the collector off; answer what a collection then finds."""
    seen: list[int] = []
    worker = Worker(_registry(database_url, seen), database_url, concurrency=20)
    _enqueue(database_url, name, JOBS)
    gc.collect()
    gc.disable()
    try:
        asyncio.run(run_until(worker, lambda: worker.stats().completed >= JOBS))
        return gc.collect(), seen
    finally:
        gc.enable()


def test_an_async_attempt_leaves_no_cycle_behind(database_url):
    # each attempt once left about 37 objects in cycles (its signal's callbacks closed over the
    # attempt): the collector ran every few hundred jobs and took a third of the worker's CPU
    found, seen = _garbage_after_run(database_url, "quick")
    assert sorted(seen) == list(range(JOBS))
    assert found < LEFT_BY_A_RUN, f"{found} objects in cycles after {JOBS} attempts"


def test_a_plain_def_attempt_leaves_no_cycle_behind(database_url):
    found, seen = _garbage_after_run(database_url, "quick-sync")
    assert sorted(seen) == list(range(JOBS))
    assert found < LEFT_BY_A_RUN, f"{found} objects in cycles after {JOBS} attempts"


def test_freeze_gc_takes_the_startup_objects_out_of_the_collectors_walks(database_url):
    seen: list[int] = []
    worker = Worker(_registry(database_url, seen), database_url, freeze_gc=True)
    _enqueue(database_url, "quick", 1)
    gc.unfreeze()
    try:
        asyncio.run(run_until(worker, lambda: bool(seen)))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_by_default_a_worker_leaves_the_collector_alone(database_url):
    seen: list[int] = []
    worker = Worker(_registry(database_url, seen), database_url)
    _enqueue(database_url, "quick", 1)
    gc.unfreeze()
    asyncio.run(run_until(worker, lambda: bool(seen)))
    assert gc.get_freeze_count() == 0


def test_a_handler_that_fails_before_its_body_runs_is_an_ordinary_failure(database_url):
    """Calling the handler raised (here it takes no ctx): the attempt fails and settles like any
    failure, its slot frees, and the worker runs the next job and stops cleanly."""
    registry = durajobs.Registry(database_url=database_url)
    seen: list[int] = []

    @declare(registry, "no-ctx", input=Numbered, idempotency_key=_by_n)
    async def no_ctx() -> None:  # type: ignore[misc]
        seen.append(-1)

    @declare(registry, "fine", input=Numbered, idempotency_key=_by_n)
    async def fine(ctx: durajobs.JobContext[Numbered]) -> None:
        seen.append(ctx.input.n)

    _enqueue(database_url, "no-ctx", 1)
    _enqueue(database_url, "fine", 3)
    worker = Worker(registry, database_url, concurrency=1)
    asyncio.run(run_until(worker, lambda: sum(worker.stats().outcomes.values()) >= 4))

    assert sorted(seen) == [0, 1, 2]
    assert worker.stats().outcomes == {"completed": 3, "retried": 1}
    with psycopg.connect(database_url, autocommit=True) as connection:
        state, error = connection.execute(
            "select state, last_error from jobs.jobs where name = 'no-ctx'"
        ).fetchone()
    assert state == "ready"  # a counted attempt, its retry scheduled
    assert "TypeError" in error
