"""One claimed attempt, executed against the real database: the JobExecution and the rows it leaves.

Each test claims with `durajobs._db.calls.claim` on an AsyncDatabase, runs `attempt.run_attempt`
with a fresh CancelSignal and a stub lease, and reads jobs.jobs and jobs.steps from another session.
Times are compared on the database's clock: a nack writes `run_at = now + delay` and
`updated_at = now` in one statement, so `run_at - updated_at` is the delay it chose.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs._values.records import ClaimedJob
from durajobs._values.states import JobState
from durajobs.declare.retry import ErrorClass, RetryPolicy, register_error_class
from durajobs.errors import (
    Aborted,
    Draining,
    DriverUnavailable,
    JobCancelled,
    JobLeaseLost,
)
from durajobs.runtime.attempt import JobExecution, Outcome, run_attempt
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.steps import AsyncSteps
from support.factory import declare
from support.leases import HeldLease
from support.models import Actor, Item
from support.outbox import eventually

WORKER = "worker-1"
TERMINAL_CODE = "X_TEST_EXECUTION_CARD_DECLINED"
UNCLASSIFIED_CODE = "X_TEST_EXECUTION_NEVER_CLASSIFIED"

register_error_class(TERMINAL_CODE, ErrorClass.TERMINAL)


class Counted(Item):
    """An Item keyed "k" unless given, with a number for the body to work on."""

    key: str = "k"
    n: int = 0


class CardDeclined(Exception):
    code = TERMINAL_CODE


class Unclassified(Exception):
    code = UNCLASSIFIED_CODE


class RateLimited(Exception):
    code = "X_RATE_LIMITED"

    def __init__(self, message: str, retry_after: Any = None) -> None:
        super().__init__(message)
        if retry_after is not None:
            self.retry_after = retry_after


class Unwinding(Exception):
    """The body's own exception type, raised on its way out of a cancelled attempt."""


def _declare(registry: durajobs.Registry, name: str = "work", **options: Any):
    return declare(registry, name, input=Counted, **options)


def _run(database_url: str, scenario: Callable[[AsyncDatabase], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with AsyncDatabase(database_url, min_size=1, max_size=4) as db:
            return await scenario(db)

    return asyncio.run(main())


async def _claim(db: AsyncDatabase, *, queue: str = "default", wait: float = 5.0) -> ClaimedJob:
    """Claim one row, polling (bounded) until one is due."""
    deadline = time.monotonic() + wait
    while True:
        claimed = await db.run(calls.claim([queue], WORKER))
        if claimed:
            (row,) = claimed
            assert row.state is JobState.RUNNING
            return row
        assert time.monotonic() < deadline, f"nothing became claimable within {wait} s"
        await asyncio.sleep(0.02)


async def _claim_when_due(database_url: str, job_id: uuid.UUID) -> ClaimedJob:
    """Claim the row `job_id` at its run_at on the database's clock instead of waiting for it:
    the claiming session pins `durajobs.now` there (or at now(), if that is later)."""

    def claim() -> list[ClaimedJob]:
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(
                "select set_config('durajobs.now', greatest(run_at, now())::text, false)"
                " from jobs.jobs where id = %s",
                [job_id],
            )
            return durajobs.execute(connection, calls.claim(["default"], WORKER))

    (row,) = await asyncio.to_thread(claim)
    assert (row.id, row.state) == (job_id, JobState.RUNNING)
    return row


async def _execute(
    db: AsyncDatabase,
    registry: durajobs.Registry,
    claimed: ClaimedJob,
    *,
    signal: CancelSignal | None = None,
    lease: HeldLease | None = None,
    on_abandoned: Callable[[JobExecution], None] | None = None,
) -> JobExecution:
    return await run_attempt(
        claimed,
        registry,
        db=db,
        signal=signal or CancelSignal(),
        lease=lease or HeldLease(),
        on_abandoned=on_abandoned,
    )


def _row(connection: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    cursor = connection.execute(
        """select state, attempt, max_attempts, last_error, last_error_code, last_error_stack,
                  run_at, updated_at, finished_at, claimed_by, claims,
                  extract(epoch from run_at - updated_at)::float8 as delay,
                  extract(epoch from run_at - now())::float8 as due_in
             from jobs.jobs where id = %s""",
        [job_id],
    )
    columns = [column.name for column in cursor.description]
    found = cursor.fetchone()
    assert found is not None, f"no row {job_id}"
    return dict(zip(columns, found, strict=True))


def _state(connection: psycopg.Connection[Any], job_id: uuid.UUID) -> str:
    return connection.execute("select state from jobs.jobs where id = %s", [job_id]).fetchone()[0]


def _snapshot(connection: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    found = connection.execute(
        "select to_jsonb(j) from jobs.jobs j where j.id = %s", [job_id]
    ).fetchone()
    return found[0]


def _steps(connection: psycopg.Connection[Any], run_id: uuid.UUID) -> list[tuple[Any, ...]]:
    return connection.execute(
        "select name, status, output from jobs.steps where run_id = %s order by started_at, name",
        [run_id],
    ).fetchall()


def _wait_for(event: threading.Event, what: str, timeout: float = 5.0) -> Awaitable[None]:
    async def wait() -> None:
        assert await asyncio.to_thread(event.wait, timeout), f"{what} did not happen in time"

    return wait()


def _near(value: float, expected: float, tolerance: float = 0.1) -> bool:
    return abs(value - expected) <= tolerance


# -- completed ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_completed_attempt_acks_and_tells_on_settled_once(database_url, connect, kind):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[tuple[durajobs.Settled, str]] = []

    def on_settled(ending: durajobs.Settled) -> None:
        # the ack has landed before the hook runs
        settled.append((ending, _state(observer, ending.job_id)))

    if kind == "async":

        @_declare(registry, on_settled=on_settled)
        async def job(ctx):
            await asyncio.sleep(0)
            return {"answer": ctx.input.n + 1, "attempt": ctx.attempt}

    else:

        @_declare(registry, on_settled=on_settled)
        def job(ctx):
            return {"answer": ctx.input.n + 1, "attempt": ctx.attempt}

    queued = job.enqueue(Counted(n=41))
    lease = HeldLease()

    async def scenario(db):
        return await _execute(db, registry, await _claim(db), lease=lease)

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.COMPLETED
    assert execution.result == {"answer": 42, "attempt": 1}
    assert (execution.job_id, execution.name, execution.attempt) == (queued.id, "work", 1)
    assert execution.error is None
    assert execution.code is None
    assert execution.stop_reason is None
    assert execution.resume_at is None
    assert (execution.steps, execution.replayed) == ([], [])
    assert timedelta(0) <= execution.duration < timedelta(seconds=5)
    assert lease.stops >= 1

    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error"], row["last_error_code"]) == (
        "done",
        1,
        None,
        None,
    )
    assert row["finished_at"] is not None

    assert len(settled) == 1
    ending, state_seen = settled[0]
    assert state_seen == "done"
    assert ending == durajobs.Settled(
        job="work",
        job_id=queued.id,
        run_id=queued.run_id,
        outcome="completed",
        attempt=1,
        error=None,
        code=None,
        input={"key": "k", "n": 41},
        result={"answer": 42, "attempt": 1},
        tenant_id=None,
        queue="default",
    )


def test_the_context_carries_the_claimed_row(database_url, connect):
    registry = durajobs.Registry(database_url=database_url)
    seen: list[Any] = []

    @_declare(
        registry,
        tenant=lambda item: f"org-{item.key}",
        queue="billing",
        retry=RetryPolicy.of(attempts=4),
    )
    async def job(ctx):
        seen.append(ctx)

    actor = Actor(id="user-1", org_id="org-a")  # the org the input names
    queued = job.as_(actor, Counted(key="a", n=3))

    async def scenario(db):
        return await _execute(db, registry, await _claim(db, queue="billing"))

    assert _run(database_url, scenario).outcome is Outcome.COMPLETED
    (ctx,) = seen
    assert ctx.input == Counted(key="a", n=3)
    assert (ctx.job, ctx.job_id, ctx.run_id, ctx.queue) == (
        "work",
        queued.id,
        queued.run_id,
        "billing",
    )
    assert (ctx.attempt, ctx.max_attempts, ctx.final_attempt) == (1, 4, False)
    assert (ctx.tenant_id, ctx.enqueued_by) == ("org-a", "user-1")
    assert ctx.cancelled is False
    assert isinstance(ctx.step, AsyncSteps)


def test_an_async_on_settled_is_awaited(database_url, connect):
    registry = durajobs.Registry(database_url=database_url)
    settled: list[str] = []

    async def on_settled(ending):
        await asyncio.sleep(0)
        settled.append(ending.outcome)

    @_declare(registry, on_settled=on_settled)
    def job(ctx):
        return "ok"

    job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    assert _run(database_url, scenario).result == "ok"
    assert settled == ["completed"]


@pytest.mark.parametrize(("failures", "calls_expected"), [(1, 2), (2, 3), (None, 3)])
def test_a_failing_on_settled_is_retried_up_to_three_times_and_never_changes_the_row(
    database_url, connect, failures, calls_expected, caplog
):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    hook_calls: list[dict[str, Any]] = []

    def on_settled(ending):
        hook_calls.append(_snapshot(observer, ending.job_id))
        if failures is None or len(hook_calls) <= failures:
            raise RuntimeError("the hook's own failure")

    @_declare(registry, on_settled=on_settled)
    async def job(ctx):
        return "ok"

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.COMPLETED
    assert execution.result == "ok"
    assert execution.error is None
    assert len(hook_calls) == calls_expected
    after = _snapshot(observer, queued.id)
    assert after["state"] == "done"
    assert all(seen == after for seen in hook_calls)  # nothing the hook did moved the row
    failed = [r for r in caplog.records if r.getMessage() == "jobs.on-settled.failed"]
    tries = calls_expected if failures is None else failures
    assert [getattr(r, "try") for r in failed] == list(range(1, tries + 1))
    # only a hook that failed its every try is reported with the code and its fix
    reported = [getattr(r, "code", None) for r in failed]
    if failures is None:
        assert reported == [None, None, durajobs.JobOnSettledFailed.code]
        assert failed[-1].fix == durajobs.JobOnSettledFailed.fix
    else:
        assert reported == [None] * failures


def test_on_settled_is_told_the_runs_tenant_and_queue(database_url):
    registry = durajobs.Registry(database_url=database_url)
    told: list[durajobs.Settled] = []

    @declare(
        registry,
        "tenanted",
        input=Counted,
        idempotency_key=lambda c: str(c.n),
        tenant=lambda c: f"org-{c.n}",
        queue="billing",
        on_settled=told.append,
    )
    async def tenanted(ctx):
        return "ok"

    tenanted.enqueue(Counted(n=7))

    async def scenario(db):
        return await _execute(db, registry, await _claim(db, queue="billing"))

    assert _run(database_url, scenario).outcome is Outcome.COMPLETED
    assert [(t.tenant_id, t.queue, t.outcome) for t in told] == [("org-7", "billing", "completed")]


# -- durable steps --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_step_answers_its_first_run_what_every_replay_answers(database_url, kind):
    """jsonb orders an object's keys its own way (shorter first) and writes 1e16 as an integer:
    answered as the function returned it, the first run iterated the keys in another order
    than the replay (a loop enqueuing a child a key, with derived names, then matched them
    wrongly) and saw a float where the replay saw an int."""
    registry = durajobs.Registry(database_url=database_url)
    seen: list[tuple[list[str], str]] = []
    policy = RetryPolicy.of(attempts=3, delay="20ms", jitter=False)

    def totals() -> dict[str, float]:
        return {"zeta": 1e16, "a": 2.0, "bb": 3.0}

    async def totals_async() -> dict[str, float]:
        return totals()

    if kind == "async":

        @_declare(registry, retry=policy)
        async def job(ctx):
            answer = await ctx.step.run("totals", totals_async)
            seen.append((list(answer), type(answer["zeta"]).__name__))
            if ctx.attempt == 1:
                raise RuntimeError("again, from the stored step")

    else:

        @_declare(registry, retry=policy)
        def job(ctx):
            answer = ctx.step.run("totals", totals)
            seen.append((list(answer), type(answer["zeta"]).__name__))
            if ctx.attempt == 1:
                raise RuntimeError("again, from the stored step")

    job.enqueue(Counted())

    async def scenario(db):
        await _execute(db, registry, await _claim(db))
        await _execute(db, registry, await _claim(db))

    _run(database_url, scenario)
    assert len(seen) == 2
    assert seen[0] == seen[1], "the first run and the replay saw different values"


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_retried_run_replays_stored_steps_without_calling_them(database_url, connect, kind):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: dict[str, int] = {"one": 0, "two": 0}
    policy = RetryPolicy.of(attempts=3, delay="20ms", jitter=False)

    def one_sync():
        called["one"] += 1
        return {"v": 1}

    async def one_async():
        called["one"] += 1
        return {"v": 1}

    def two(previous):
        def run():
            called["two"] += 1
            return [previous["v"], 2]

        return run

    if kind == "async":

        @_declare(registry, retry=policy)
        async def job(ctx):
            first = await ctx.step.run("one", one_async)
            if ctx.attempt == 1:
                raise RuntimeError("failed after step one")
            second = await ctx.step.run("two", two(first))
            return {"first": first, "second": second}

    else:

        @_declare(registry, retry=policy)
        def job(ctx):
            first = ctx.step.run("one", one_sync)
            if ctx.attempt == 1:
                raise RuntimeError("failed after step one")
            second = ctx.step.run("two", two(first))
            return {"first": first, "second": second}

    queued = job.enqueue(Counted())
    between: dict[str, Any] = {}

    async def scenario(db):
        first = await _execute(db, registry, await _claim(db))
        between["row"] = _row(observer, queued.id)
        between["steps"] = _steps(observer, queued.run_id)
        second = await _execute(db, registry, await _claim(db))
        return first, second

    first, second = _run(database_url, scenario)

    assert first.outcome is Outcome.RETRIED
    assert (first.steps, first.replayed) == (["one"], [])
    assert "RuntimeError: failed after step one" in first.error
    assert between["row"]["state"] == "ready"
    assert between["row"]["attempt"] == 1
    assert "RuntimeError: failed after step one" in between["row"]["last_error"]
    assert between["steps"] == [("one", "completed", {"v": 1})]

    assert second.outcome is Outcome.COMPLETED
    assert second.attempt == 2
    assert (second.steps, second.replayed) == (["two"], ["one"])
    assert second.result == {"first": {"v": 1}, "second": [1, 2]}
    assert called == {"one": 1, "two": 1}

    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("done", 2)
    assert _steps(observer, queued.run_id) == [
        ("one", "completed", {"v": 1}),
        ("two", "completed", [1, 2]),
    ]


@pytest.mark.parametrize(
    "output",
    [{1, 2}, object(), float("nan"), {"at": datetime(2026, 1, 1, tzinfo=UTC)}, b"bytes"],
    ids=["set", "object", "nan", "datetime", "bytes"],
)
def test_a_step_result_that_is_not_json_is_terminal(database_url, connect, output):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry, retry=RetryPolicy.of(attempts=5))
    async def job(ctx):
        await ctx.step.run("fetch", lambda: output)
        return "unreachable"

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.DEAD_LETTERED
    assert execution.code == "X_STEP_OUTPUT_INVALID"
    assert execution.stop_reason == "terminal"
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error_code"]) == (
        "dead",
        1,
        "X_STEP_OUTPUT_INVALID",
    )
    assert "fetch" in row["last_error"]
    assert _steps(observer, queued.run_id) == []


@pytest.mark.parametrize("kind", ["async", "def"])
def test_the_same_step_name_twice_in_one_run_is_terminal(database_url, connect, kind):
    """A duplicate step name dead-letters on attempt 1 even with attempts=5."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: list[str] = []

    def charge():
        called.append("charge")
        return {"charged": len(called)}

    if kind == "async":

        @_declare(registry, retry=RetryPolicy.of(attempts=5))
        async def job(ctx):
            await ctx.step.run("charge", charge)
            await ctx.step.run("charge", charge)

    else:

        @_declare(registry, retry=RetryPolicy.of(attempts=5))
        def job(ctx):
            ctx.step.run("charge", charge)
            ctx.step.run("charge", charge)

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.DEAD_LETTERED
    assert execution.code == "X_STEP_DUPLICATE"
    assert execution.stop_reason == "terminal"
    assert execution.steps == ["charge"]
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["max_attempts"], row["last_error_code"]) == (
        "dead",
        1,
        5,
        "X_STEP_DUPLICATE",
    )
    assert "terminal code X_STEP_DUPLICATE" in row["last_error"]
    assert called == ["charge"]  # never a silent second run or overwrite
    assert _steps(observer, queued.run_id) == [("charge", "completed", {"charged": 1})]


def test_an_unknown_stored_step_status_parks_the_run_without_calling_the_step(
    database_url, connect
):
    """R22: a status a newer release wrote is never read as 'not completed'."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: list[str] = []
    settled: list[str] = []

    @_declare(registry, retry=RetryPolicy.of(attempts=5), on_settled=lambda s: settled.append(s))
    async def job(ctx):
        called.append("body")
        await ctx.step.run("charge", lambda: called.append("charge"))

    queued = job.enqueue(Counted())
    observer.execute(
        """insert into jobs.steps (run_id, name, status, output, started_at, updated_at)
           values (%s, 'charge', 'archived', '{"charged": true}', now(), now())""",
        [queued.run_id],
    )

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert called == []
    assert settled == []
    assert execution.outcome is Outcome.PARKED
    assert execution.code == "X_JOB_ROW_STATUS_UNKNOWN"
    assert "archived" in execution.error
    row = _row(observer, queued.id)
    assert row["state"] == "suspended"
    assert row["attempt"] == 0  # given back
    assert row["last_error_code"] == "X_JOB_ROW_STATUS_UNKNOWN"
    assert "archived" in row["last_error"]
    assert _near(row["delay"], 30)
    assert _steps(observer, queued.run_id) == [("charge", "archived", {"charged": True})]


# -- step.sleep -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_sleep_suspends_uncounted_and_a_later_claim_resumes(database_url, connect, kind):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: list[str] = []
    settled: list[str] = []

    def before():
        called.append("before")
        return "prepared"

    if kind == "async":

        @_declare(registry, on_settled=lambda s: settled.append(s.outcome))
        async def job(ctx):
            prepared = await ctx.step.run("before", before)
            await ctx.step.sleep("nap", "1s")
            return f"{prepared} and woke"

    else:

        @_declare(registry, on_settled=lambda s: settled.append(s.outcome))
        def job(ctx):
            prepared = ctx.step.run("before", before)
            ctx.step.sleep("nap", "1s")
            return f"{prepared} and woke"

    queued = job.enqueue(Counted())
    parked: dict[str, Any] = {}

    async def scenario(db):
        first = await _execute(db, registry, await _claim(db))
        parked["row"] = _row(observer, queued.id)
        parked["steps"] = _steps(observer, queued.run_id)
        parked["wake_at"], parked["slept_for"], parked["run_at_vs_wake"] = observer.execute(
            """select s.wake_at,
                      extract(epoch from s.wake_at - s.started_at)::float8,
                      extract(epoch from j.run_at - s.wake_at)::float8
                 from jobs.steps s join jobs.jobs j on j.run_id = s.run_id
                where s.run_id = %s and s.name = 'nap'""",
            [queued.run_id],
        ).fetchone()
        parked["settled"] = list(settled)
        parked["claimable"] = await db.run(calls.claim(["default"], WORKER))
        resumed_claim = await _claim(db)
        second = await _execute(db, registry, resumed_claim)
        return first, resumed_claim, second

    first, resumed_claim, second = _run(database_url, scenario)

    assert first.outcome is Outcome.SUSPENDED
    assert first.error is None
    assert first.steps == ["before"]
    assert first.resume_at is not None
    assert first.resume_at == parked["wake_at"]
    assert _near(parked["slept_for"], 1.0, tolerance=0.1)  # wake = now + duration
    assert abs(parked["run_at_vs_wake"]) < 0.1  # the row is due at the wake time
    assert parked["settled"] == []  # a suspension is not an ending
    row = parked["row"]
    assert row["state"] == "suspended"
    assert row["attempt"] == 0  # the attempt is given back
    assert row["last_error"] is None
    assert 0.5 < row["delay"] <= 1.0
    assert parked["steps"] == [("before", "completed", "prepared"), ("nap", "sleeping", None)]
    assert parked["claimable"] == []  # not before its wake time

    assert resumed_claim.attempt == 1  # the same attempt number again
    assert second.outcome is Outcome.COMPLETED
    assert second.result == "prepared and woke"
    assert (second.steps, second.replayed) == (["nap"], ["before"])
    assert called == ["before"]
    assert settled == ["completed"]
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("done", 1)
    assert _steps(observer, queued.run_id) == [
        ("before", "completed", "prepared"),
        ("nap", "completed", None),
    ]


def test_a_suspension_passes_through_except_exception(database_url, connect):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry)
    async def job(ctx):
        try:
            await ctx.step.sleep("nap", "1h")
        except Exception:
            return "swallowed"
        return "woke"

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    assert _run(database_url, scenario).outcome is Outcome.SUSPENDED
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("suspended", 0)
    assert _near(row["delay"], 3600, tolerance=1)


def test_a_single_attempt_job_that_sleeps_three_times_completes(database_url, connect):
    """R96: a suspension never burns an attempt."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry, retry=RetryPolicy.of(attempts=1))
    async def job(ctx):
        for name in ("first", "second", "third"):
            await ctx.step.sleep(name, "50ms")
        return "rested"

    queued = job.enqueue(Counted())

    async def scenario(db):
        seen = []
        for _ in range(4):
            claimed = await _claim(db)
            execution = await _execute(db, registry, claimed)
            row = _row(observer, queued.id)
            seen.append((claimed.attempt, execution.outcome, row["state"], row["attempt"]))
        return seen, execution

    seen, last = _run(database_url, scenario)
    assert seen == [
        (1, Outcome.SUSPENDED, "suspended", 0),
        (1, Outcome.SUSPENDED, "suspended", 0),
        (1, Outcome.SUSPENDED, "suspended", 0),
        (1, Outcome.COMPLETED, "done", 1),
    ]
    assert last.result == "rested"
    assert [name for name, status, _ in _steps(observer, queued.run_id)] == [
        "first",
        "second",
        "third",
    ]
    assert {status for _, status, _ in _steps(observer, queued.run_id)} == {"completed"}


def test_a_sleep_named_by_its_duration(database_url, connect):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry)
    def job(ctx):
        ctx.step.sleep("50ms")
        ctx.step.sleep("50ms")
        return "twice"

    queued = job.enqueue(Counted())

    async def scenario(db):
        outcomes = []
        names = []
        while not outcomes or outcomes[-1] is Outcome.SUSPENDED:
            assert len(outcomes) < 5
            execution = await _execute(db, registry, await _claim(db))
            outcomes.append(execution.outcome)
            names.append([name for name, _, _ in _steps(observer, queued.run_id)])
        return outcomes, names

    outcomes, names = _run(database_url, scenario)
    assert outcomes == [Outcome.SUSPENDED, Outcome.SUSPENDED, Outcome.COMPLETED]
    assert names[0] == ["sleep:50ms#1"]
    assert names[-1] == ["sleep:50ms#1", "sleep:50ms#2"]
    assert {status for _, status, _ in _steps(observer, queued.run_id)} == {"completed"}


# -- retries --------------------------------------------------------------------------------------


def test_a_plain_exception_follows_the_backoff(database_url, connect):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[str] = []

    @_declare(
        registry,
        retry=RetryPolicy.of(attempts=5, delay="10s", jitter=False),
        on_settled=lambda s: settled.append(s.outcome),
    )
    async def job(ctx):
        raise RuntimeError("card network down")

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    before = datetime.now(UTC)
    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.RETRIED
    assert execution.error == "RuntimeError: card network down"
    assert execution.code is None
    assert execution.stop_reason is None
    assert before + timedelta(seconds=9) < execution.resume_at < before + timedelta(seconds=15)
    assert settled == []  # a retry is not an ending
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error_code"]) == ("ready", 1, None)
    assert "card network down" in row["last_error"]
    assert "Traceback" in row["last_error_stack"]
    assert row["delay"] == 10
    assert 8 < row["due_in"] <= 10  # in the future, on the database's clock


def test_a_terminal_code_dead_letters_on_the_attempt_it_happens(database_url, connect):
    """R46: attempt 1 of 5, and the rest are never spent."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[durajobs.Settled] = []

    @_declare(registry, retry=RetryPolicy.of(attempts=5), on_settled=settled.append)
    async def job(ctx):
        raise CardDeclined("the card was declined")

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.DEAD_LETTERED
    assert execution.stop_reason == "terminal"
    assert execution.code == TERMINAL_CODE
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("dead", 1, 5)
    assert row["last_error_code"] == TERMINAL_CODE
    assert "the card was declined" in row["last_error"]
    assert f"terminal code {TERMINAL_CODE}" in row["last_error"]
    assert "dead-lettered" in row["last_error"]
    assert row["finished_at"] is not None
    assert [(s.outcome, s.code, s.attempt) for s in settled] == [
        ("dead-lettered", TERMINAL_CODE, 1)
    ]


def test_exhausted_attempts_dead_letter(database_url, connect):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[str] = []

    @_declare(
        registry,
        retry=RetryPolicy.of(attempts=2, delay="20ms", jitter=False),
        on_settled=lambda s: settled.append(s.outcome),
    )
    def job(ctx):
        raise ValueError(f"attempt {ctx.attempt} failed")

    queued = job.enqueue(Counted())

    async def scenario(db):
        first = await _execute(db, registry, await _claim(db))
        settled_after_first = list(settled)
        second = await _execute(db, registry, await _claim(db))
        return first, settled_after_first, second

    first, settled_after_first, second = _run(database_url, scenario)
    assert first.outcome is Outcome.RETRIED
    assert settled_after_first == []
    assert second.outcome is Outcome.DEAD_LETTERED
    assert second.stop_reason == "attempts-exhausted"
    assert second.attempt == 2
    assert second.error == "ValueError: attempt 2 failed"
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("dead", 2)
    assert "ValueError: attempt 2 failed" in row["last_error"]
    assert "X_JOB_MAX_ATTEMPTS" in row["last_error"]
    assert "2 of 2" in row["last_error"]
    assert settled == ["dead-lettered"]


@pytest.mark.parametrize("cause", ["exhausted", "terminal"])
def test_without_dead_letter_the_row_ends_failed_and_dropped(database_url, connect, cause):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[durajobs.Settled] = []
    attempts = 1 if cause == "exhausted" else 5

    @_declare(
        registry,
        retry=RetryPolicy(attempts=attempts, dead_letter=False),
        on_settled=settled.append,
    )
    async def job(ctx):
        if cause == "terminal":
            raise CardDeclined("declined")
        raise RuntimeError("broken")

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.DROPPED
    assert execution.stop_reason == ("attempts-exhausted" if cause == "exhausted" else "terminal")
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("failed", 1)
    assert "dropped" in row["last_error"]
    assert [s.outcome for s in settled] == ["dropped"]


@pytest.mark.parametrize(
    ("error", "max_delay", "expected"),
    [
        (RateLimited("slow down", retry_after=7), "1h", 7),
        (RateLimited("slow down", retry_after=7.5), "1h", 7.5),
        (RateLimited("slow down", retry_after=timedelta(seconds=7)), "1h", 7),
        (RateLimited("slow down", retry_after=7), "3s", 3),  # clamped by max_delay
        (RateLimited("slow down"), "1h", 2),  # nothing stated: the backoff
    ],
    ids=["seconds", "fraction", "timedelta", "clamped", "unstated"],
)
def test_a_retry_after_error_retries_when_it_says(
    database_url, connect, error, max_delay, expected
):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(
        registry, retry=RetryPolicy.of(attempts=5, delay="2s", max_delay=max_delay, jitter=False)
    )
    async def job(ctx):
        raise error

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.RETRIED
    assert execution.code == "X_RATE_LIMITED"
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error_code"]) == ("ready", 1, "X_RATE_LIMITED")
    assert row["delay"] == expected
    assert expected - 2 < row["due_in"] <= expected


def test_an_infinite_retry_after_is_clamped_by_max_delay(database_url, connect):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry, retry=RetryPolicy.of(attempts=5, max_delay="1h", jitter=False))
    async def job(ctx):
        raise RateLimited("come back never", retry_after=float("inf"))

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.RETRIED
    assert _row(observer, queued.id)["delay"] == 3600


@pytest.mark.parametrize(
    ("make_error", "code"),
    [
        (lambda: ValueError("plain"), None),
        (lambda: Unclassified("nobody classified me"), UNCLASSIFIED_CODE),
        (lambda: DriverUnavailable("database away"), "X_DRIVER_UNAVAILABLE"),
    ],
    ids=["plain-valueerror", "unclassified-code", "retryable-code"],
)
def test_plain_and_unclassified_errors_follow_the_backoff(database_url, connect, make_error, code):
    """R47: an unclassified code is never read as terminal."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry, retry=RetryPolicy.of(attempts=4, delay="100ms", jitter=False))
    async def job(ctx):
        raise make_error()

    queued = job.enqueue(Counted())

    async def scenario(db):
        seen = []
        for _ in range(4):
            claimed = await _claim_when_due(database_url, queued.id)  # each backoff, on the clock
            execution = await _execute(db, registry, claimed)
            row = _row(observer, queued.id)
            seen.append(
                (execution.outcome, execution.code, row["state"], row["attempt"], row["delay"])
            )
        return seen, execution

    seen, last = _run(database_url, scenario)
    assert seen[:3] == [
        (Outcome.RETRIED, code, "ready", 1, 0.1),
        (Outcome.RETRIED, code, "ready", 2, 0.2),
        (Outcome.RETRIED, code, "ready", 3, 0.4),
    ]
    assert seen[3][:4] == (Outcome.DEAD_LETTERED, code, "dead", 4)
    assert last.stop_reason == "attempts-exhausted"
    assert _row(observer, queued.id)["last_error_code"] == code


# -- timeouts -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "state", "outcome"),
    [(3, "ready", Outcome.RETRIED), (1, "dead", Outcome.DEAD_LETTERED)],
)
def test_a_deadline_cancels_before_the_row_leaves_running(
    database_url, connect, attempts, state, outcome
):
    """R43: the signal is set, and the body sees it, while the row is still 'running'."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    seen: list[tuple[Any, ...]] = []

    @_declare(
        registry,
        timeout="200ms",
        retry=RetryPolicy.of(attempts=attempts, delay="5s", jitter=False),
    )
    async def job(ctx):
        ctx.signal.on_cancel(
            lambda reason: seen.append(("signal", reason.code, _state(observer, ctx.job_id)))
        )
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            seen.append(("body", ctx.cancelled, _state(observer, ctx.job_id)))
            raise
        return "overslept"

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert seen == [("signal", "X_JOB_TIMEOUT", "running"), ("body", True, "running")]
    assert execution.outcome is outcome
    assert execution.code == "X_JOB_TIMEOUT"
    assert "timeout" in execution.error
    assert execution.duration < timedelta(seconds=2)  # never waited out the 5 s body
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error_code"]) == (state, 1, "X_JOB_TIMEOUT")
    if state == "ready":
        assert row["delay"] == 5


def test_a_body_ignoring_its_deadline_cannot_write_after_it(database_url, connect):
    """R43: the attempt ends without the body; its late step write is refused."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    started, finished = threading.Event(), threading.Event()
    late: list[BaseException] = []
    abandoned: list[JobExecution] = []

    @_declare(registry, timeout="200ms", retry=RetryPolicy.of(attempts=3, delay="5s", jitter=False))
    def job(ctx):
        started.set()
        time.sleep(1.5)  # ignores ctx.cancelled, past the deadline and the unwind grace
        try:
            ctx.step.run("late", lambda: "written too late")
        except BaseException as refused:
            late.append(refused)
        finally:
            finished.set()
        return "finished late"

    queued = job.enqueue(Counted())
    observed: dict[str, Any] = {}

    async def scenario(db):
        execution = await _execute(db, registry, await _claim(db), on_abandoned=abandoned.append)
        observed["finished_first"] = finished.is_set()
        observed["row"] = _snapshot(observer, queued.id)
        await _wait_for(finished, "the late body")
        # the done callback reports the abandoned body
        await eventually(lambda: abandoned, timeout=5, what="the abandoned body's report")
        return execution

    execution = _run(database_url, scenario)
    assert observed["finished_first"] is False  # the attempt ended before the body did
    assert execution.outcome is Outcome.RETRIED
    assert execution.code == "X_JOB_TIMEOUT"
    assert execution.duration < timedelta(seconds=1.4)

    assert len(late) == 1
    assert isinstance(late[0], Aborted)
    assert late[0].code == "X_ABORTED"
    assert _steps(observer, queued.run_id) == []
    after = _snapshot(observer, queued.id)
    assert after == observed["row"]  # no write from the old body
    assert (after["state"], after["attempt"], after["last_error_code"]) == (
        "ready",
        1,
        "X_JOB_TIMEOUT",
    )
    assert [e.outcome for e in abandoned] == [Outcome.UNOWNED]


def _slow_async_step(seen: list[Any]):
    async def slow(signal: CancelSignal):
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            seen.append(signal.reason.code if signal.reason else None)
            raise
        return "slept"

    return slow


def _slow_sync_step(seen: list[Any]):
    def slow(signal: CancelSignal):
        signal.wait(1)
        seen.append(signal.reason.code if signal.reason else None)
        return "slept"

    return slow


@pytest.mark.parametrize(
    ("handler_kind", "step_kind"),
    [
        ("async", "async"),
        ("async", "def"),
        ("def", "def"),
    ],
    ids=["async-job-async-step", "async-job-def-step", "def-job-def-step"],
)
def test_a_step_past_its_step_timeout_fails_with_x_job_timeout_naming_it(
    database_url, connect, handler_kind, step_kind
):
    """R26: step_timeout reaches the step; its signal is set, then the step fails."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    seen: list[Any] = []
    slow = _slow_async_step(seen) if step_kind == "async" else _slow_sync_step(seen)
    policy = RetryPolicy.of(attempts=3, delay="5s", jitter=False)

    if handler_kind == "async":

        @_declare(registry, step_timeout="100ms", retry=policy)
        async def job(ctx):
            return await ctx.step.run("slow-call", slow)

    else:

        @_declare(registry, step_timeout="100ms", retry=policy)
        def job(ctx):
            return ctx.step.run("slow-call", slow)

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert seen == ["X_JOB_TIMEOUT"]  # the step's own signal was set by its ceiling
    assert execution.outcome is Outcome.RETRIED
    assert execution.code == "X_JOB_TIMEOUT"
    assert "'slow-call'" in execution.error
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["last_error_code"]) == ("ready", 1, "X_JOB_TIMEOUT")
    assert "'slow-call'" in row["last_error"]
    assert _steps(observer, queued.run_id) == []


# -- cancellation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "def"])
@pytest.mark.parametrize("unwinds_by", ["raising-its-own-error", "returning"])
def test_a_drain_interrupts_and_gives_the_attempt_back(database_url, connect, kind, unwinds_by):
    """R41: attempts=1 survives a drain; the verdict comes from the signal, not the body."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    started = threading.Event()
    runs: list[int] = []
    settled: list[str] = []

    def unwind():
        if unwinds_by == "returning":
            return "stopped early"
        raise Unwinding("the body's own error while unwinding")

    if kind == "async":

        @_declare(
            registry,
            retry=RetryPolicy.of(attempts=1),
            on_settled=lambda s: settled.append(s.outcome),
        )
        async def job(ctx):
            runs.append(ctx.attempt)
            if len(runs) > 1:
                return "second run"
            started.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return unwind()
            return "overslept"

    else:

        @_declare(
            registry,
            retry=RetryPolicy.of(attempts=1),
            on_settled=lambda s: settled.append(s.outcome),
        )
        def job(ctx):
            runs.append(ctx.attempt)
            if len(runs) > 1:
                return "second run"
            started.set()
            assert ctx.signal.wait(5)
            return unwind()

    queued = job.enqueue(Counted())
    between: dict[str, Any] = {}

    async def scenario(db):
        signal = CancelSignal()
        attempt = asyncio.create_task(_execute(db, registry, await _claim(db), signal=signal))
        await _wait_for(started, "the body start")
        signal.cancel(Draining("the worker is draining"))
        first = await attempt
        between["row"] = _row(observer, queued.id)
        second = await _execute(db, registry, await _claim(db))
        return first, second

    first, second = _run(database_url, scenario)
    assert first.outcome is Outcome.INTERRUPTED
    assert first.error is None
    row = between["row"]
    assert row["state"] == "ready"
    assert row["attempt"] == 0  # not counted
    assert (row["last_error"], row["last_error_code"]) == (None, None)
    assert row["delay"] == 0  # back at once

    assert second.outcome is Outcome.COMPLETED
    assert second.result == "second run"
    assert runs == [1, 1]
    assert settled == ["completed"]  # an interruption is not an ending
    assert (_row(observer, queued.id)["state"], _row(observer, queued.id)["attempt"]) == ("done", 1)


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_cancelled_row_stays_cancelled_and_on_settled_is_not_called(database_url, connect, kind):
    """R44: the body ends normally after the cancel; nothing un-cancels the row."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    started = threading.Event()
    settled: list[str] = []

    if kind == "async":

        @_declare(registry, on_settled=lambda s: settled.append(s.outcome))
        async def job(ctx):
            started.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                return "returned normally"
            return "overslept"

    else:

        @_declare(registry, on_settled=lambda s: settled.append(s.outcome))
        def job(ctx):
            started.set()
            ctx.signal.wait(5)
            return "returned normally"

    queued = job.enqueue(Counted())
    lease = HeldLease()

    async def scenario(db):
        signal = CancelSignal()
        claimed = await _claim(db)
        attempt = asyncio.create_task(_execute(db, registry, claimed, signal=signal, lease=lease))
        await _wait_for(started, "the body start")
        assert await db.run(calls.cancel(queued.id, reason="operator"))
        signal.cancel(JobCancelled("the job was cancelled"))  # what the lease keeper does
        return await attempt

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.CANCELLED
    assert lease.stops >= 1
    assert settled == []
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("cancelled", 1)
    assert (row["last_error"], row["last_error_code"]) == ("cancelled: operator", "X_JOB_CANCELLED")


@pytest.mark.parametrize("ends_by", ["returning", "writing-a-step"])
def test_a_cancel_the_worker_has_not_heard_of_is_fenced_in_sql(database_url, connect, ends_by):
    """R44: no signal yet; the ack or the step write matches nothing and the row stays put."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    settled: list[str] = []
    refused: list[BaseException] = []

    @_declare(
        registry, retry=RetryPolicy.of(attempts=1), on_settled=lambda s: settled.append(s.outcome)
    )
    def job(ctx):
        observer.execute("select jobs.cancel(%s, 'operator')", [ctx.job_id])
        if ends_by == "writing-a-step":
            try:
                ctx.step.run("after-cancel", lambda: "too late")
            except BaseException as error:
                refused.append(error)
                raise
        return "returned normally"

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    # a step write that meets the fence is the cancel's verdict; a returning body's ack just
    # matches nothing
    expected = Outcome.CANCELLED if ends_by == "writing-a-step" else Outcome.UNOWNED
    assert execution.outcome is expected
    assert settled == []
    if ends_by == "writing-a-step":
        assert [error.code for error in refused] == ["X_JOB_CANCELLED"]
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("cancelled", 1)
    assert (row["last_error"], row["last_error_code"]) == ("cancelled: operator", "X_JOB_CANCELLED")
    assert _steps(observer, queued.run_id) == []


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_lost_lease_writes_nothing_even_on_the_final_attempt(database_url, connect, kind):
    """R48: never dead-letter a row another worker owns."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    started = threading.Event()
    settled: list[str] = []

    if kind == "async":

        @_declare(
            registry,
            retry=RetryPolicy.of(attempts=1),
            on_settled=lambda s: settled.append(s.outcome),
        )
        async def job(ctx):
            started.set()
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                raise Unwinding("failing on the way out") from None

    else:

        @_declare(
            registry,
            retry=RetryPolicy.of(attempts=1),
            on_settled=lambda s: settled.append(s.outcome),
        )
        def job(ctx):
            started.set()
            ctx.signal.wait(5)
            raise Unwinding("failing on the way out")

    queued = job.enqueue(Counted())
    observed: dict[str, Any] = {}

    async def scenario(db):
        signal = CancelSignal()
        claimed = await _claim(db)
        assert claimed.final_attempt
        attempt = asyncio.create_task(_execute(db, registry, claimed, signal=signal))
        await _wait_for(started, "the body start")
        observed["before"] = _snapshot(observer, queued.id)
        signal.cancel(JobLeaseLost("another claim owns the row"))
        return await attempt

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.LEASE_LOST
    assert execution.code == "X_JOB_LEASE_LOST"
    assert settled == []
    after = _snapshot(observer, queued.id)
    assert after == observed["before"]
    assert (after["state"], after["attempt"], after["last_error"]) == ("running", 1, None)


def test_a_step_write_refused_by_the_claim_fence_does_not_dead_letter(database_url, connect):
    """R48: the row was taken over; the stale final attempt's failure settles nothing."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    refused: list[BaseException] = []
    observed: dict[str, Any] = {}

    @_declare(registry, retry=RetryPolicy.of(attempts=1))
    def job(ctx):
        # another worker takes the row over (as a re-claim after a lapse would)
        observer.execute(
            "update jobs.jobs set claimed_by = 'worker-2', claims = claims + 1 where id = %s",
            [ctx.job_id],
        )
        observed["taken_over"] = _snapshot(observer, ctx.job_id)
        try:
            ctx.step.run("charge", lambda: "charged")
        except BaseException as error:
            refused.append(error)
            raise

    queued = job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert [error.code for error in refused] == ["X_JOB_LEASE_LOST"]
    assert execution.outcome is Outcome.LEASE_LOST  # settles nothing: the row is another's
    assert _snapshot(observer, queued.id) == observed["taken_over"]
    assert _row(observer, queued.id)["state"] == "running"
    assert _steps(observer, queued.run_id) == []


# -- rows this deploy cannot run ------------------------------------------------------------------


def test_an_unknown_job_name_is_parked_uncounted(database_url, connect, client):
    """R95: parked 30 s, out of the ready bucket, attempt given back."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry)
    async def job(ctx):
        return None

    queued = client.enqueue("ghost.job", {}, "ghost:1", max_attempts=1)

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.PARKED
    assert execution.error == 'no job registered as "ghost.job"'
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("suspended", 0)
    assert row["last_error"] == 'no job registered as "ghost.job"'
    assert row["delay"] == 30
    assert 28 < row["due_in"] <= 30
    (stat,) = client.queue_stats(["default"])
    assert (stat.ready, stat.suspended, stat.dead) == (0, 1, 0)


def test_stored_input_that_no_longer_parses_dead_letters_on_attempt_one(
    database_url, connect, client
):
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: list[Any] = []
    settled: list[durajobs.Settled] = []

    @_declare(registry, on_settled=settled.append)
    async def job(ctx):
        called.append(ctx)

    queued = client.enqueue("work", {"key": "k", "n": "not a number"}, "k", max_attempts=5)

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert called == []
    assert execution.outcome is Outcome.DEAD_LETTERED
    assert execution.code == "X_JOB_INPUT_INVALID"
    assert execution.stop_reason == "terminal"
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"], row["max_attempts"]) == ("dead", 1, 5)
    assert row["last_error_code"] == "X_JOB_INPUT_INVALID"
    assert "'n'" in row["last_error"]
    assert [(s.outcome, s.code) for s in settled] == [("dead-lettered", "X_JOB_INPUT_INVALID")]


def test_a_row_acting_for_another_tenant_than_its_input_names_dies_unrun(
    database_url, connect, client
):
    """R34: a row stored before the job named its tenant in the input (or by hand, from SQL)
    must not run for the wrong org: dead on attempt 1, the body never called."""
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    called: list[Any] = []
    settled: list[durajobs.Settled] = []

    @_declare(registry, tenant=lambda item: f"org-{item.key}", on_settled=settled.append)
    async def job(ctx):
        called.append(ctx)

    queued = client.enqueue("work", {"key": "a", "n": 1}, "k", tenant_id="org-b", max_attempts=5)

    async def scenario(db):
        return await _execute(db, registry, await _claim(db))

    execution = _run(database_url, scenario)
    assert called == []
    assert execution.outcome is Outcome.DEAD_LETTERED
    assert execution.code == "X_JOB_TENANT_MISMATCH"
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("dead", 1)
    assert "'org-b'" in row["last_error"]
    assert [(s.outcome, s.code) for s in settled] == [("dead-lettered", "X_JOB_TENANT_MISMATCH")]


@pytest.mark.parametrize("kind", ["async", "def"])
def test_an_attempt_drained_before_its_body_began_does_not_start_it(database_url, connect, kind):
    # a drain landing while the attempt read its history: the body must not start at all
    observer = connect()
    registry = durajobs.Registry(database_url=database_url)
    runs: list[int] = []

    if kind == "async":

        @_declare(registry, retry=RetryPolicy.of(attempts=1))
        async def job(ctx):
            runs.append(ctx.attempt)

    else:

        @_declare(registry, retry=RetryPolicy.of(attempts=1))
        def job(ctx):
            runs.append(ctx.attempt)

    queued = job.enqueue(Counted())

    async def scenario(db):
        signal = CancelSignal()
        signal.cancel(Draining("the worker is draining"))
        return await _execute(db, registry, await _claim(db), signal=signal)

    execution = _run(database_url, scenario)
    assert execution.outcome is Outcome.INTERRUPTED
    assert runs == []
    row = _row(observer, queued.id)
    assert (row["state"], row["attempt"]) == ("ready", 0)


def test_a_settle_sent_after_the_lease_ran_out_is_logged_as_late(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)

    @_declare(registry)
    def job(ctx):
        return None

    job.enqueue(Counted())

    async def scenario(db):
        return await _execute(db, registry, await _claim(db), lease=HeldLease(late=1.5))

    with caplog.at_level(logging.WARNING, logger="durajobs"):
        execution = _run(database_url, scenario)
    late = [r for r in caplog.records if r.getMessage() == "jobs.settle.late"]
    assert [getattr(r, "late_seconds", None) for r in late] == [1.5]
    # nobody took the row meanwhile, so the late ack still lands
    assert execution.outcome is Outcome.COMPLETED
