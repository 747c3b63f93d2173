"""What a worker reads from its claims and makes of its batched acks' answers: each job's own
run, and each completion counted once, by its queue, in the worker's stats and metrics, and
logged at debug level, whichever batch brought it."""

from __future__ import annotations

import asyncio
from collections import Counter

import durajobs
from durajobs.runtime import claimer
from durajobs.runtime.worker import Worker
from support.events import recorded
from support.factory import declare
from support.models import Item
from support.running import run_until


def test_each_completion_is_counted_by_queue_and_logged_once(database_url, monkeypatch):
    """Claims of at most 7 rows split 50 completions over several ack batches: each one is in
    the outcomes, the jobs_total series of its queue and the debug log, once."""
    monkeypatch.setattr(claimer, "MAX_CLAIM", 7)
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "answers.a", queue="answers_a")
    async def first(ctx):
        return None

    @declare(registry, "answers.b", queue="answers_b")
    async def second(ctx):
        await asyncio.sleep(0)  # ends in a later loop turn than it started: still acked batched
        return None

    for n in range(30):
        first.enqueue(Item(key=f"a{n}"))
    for n in range(20):
        second.enqueue(Item(key=f"b{n}"))
    worker = Worker(registry, database_url, queues=["answers_a", "answers_b"], listen=False)

    def completed(queue: str) -> float:
        labels = {"queue": queue, "outcome": "ok"}
        return worker.metrics.sample("jobs_total", labels) or 0.0

    before = {queue: completed(queue) for queue in ("answers_a", "answers_b")}
    with recorded("durajobs.runtime.runner", "jobs.attempt.ended") as ended:
        asyncio.run(run_until(worker, lambda: worker.stats().completed == 50))
    assert worker.stats().outcomes == {durajobs.Outcome.COMPLETED: 50}
    assert Counter((e["job"], e["outcome"]) for e in ended) == {
        ("answers.a", "completed"): 30,
        ("answers.b", "completed"): 20,
    }
    assert completed("answers_a") - before["answers_a"] == 30
    assert completed("answers_b") - before["answers_b"] == 20
    assert worker._settler.statements > 2  # the answers came in more than one batch


def test_a_job_enqueued_into_a_run_runs_with_that_run_and_replays_its_steps(database_url):
    """The worker's claim sends a run_id only where it is not the job's own id: a job enqueued
    into another job's run reads that run, and the step the run already took is replayed."""
    registry = durajobs.Registry(database_url=database_url)
    seen: list[tuple[str, object, object]] = []
    took: list[str] = []

    @declare(registry, "answers.run")
    async def in_a_run(ctx):
        async def charge():
            took.append(ctx.input.key)
            return {"charged": ctx.input.key}

        output = await ctx.step.run("charge", charge)
        seen.append((ctx.input.key, ctx.run_id, output["charged"]))

    first = in_a_run.enqueue(Item(key="first"))
    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, lambda: len(seen) == 1))
    second = in_a_run.enqueue(Item(key="second"), run_id=first.run_id)
    assert second.run_id == first.run_id != second.id
    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, lambda: len(seen) == 2))
    assert seen == [
        ("first", first.id, "first"),
        ("second", first.run_id, "first"),  # replayed from the run, not taken again
    ]
    assert took == ["first"]
