"""Edges of the runtime found in review: signatures, coroutines, drains, fences, options."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import Draining
from durajobs.runtime.attempt import run_attempt
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.leases import HeldLease
from support.models import Actor
from support.outbox import eventually


def _row(database_url, job_id):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(
            "select state, attempt, last_error_code from jobs.jobs where id = %s", [job_id]
        ).fetchone()


async def _execute_one(database_url, registry, *, signal=None, before=None):
    async with AsyncDatabase(database_url) as db:
        (claimed,) = await db.run(calls.claim(["default"], "w"))
        if before is not None:
            await asyncio.to_thread(before, claimed)
        return await run_attempt(
            claimed, registry, db=db, signal=signal or CancelSignal(), lease=HeldLease()
        )


def test_a_step_fn_with_only_defaulted_parameters_gets_no_signal(database_url):
    registry = durajobs.Registry(database_url=database_url)
    seen: list[object] = []

    @declare(registry, "loop")
    async def loop_job(ctx):
        for item in ("a", "b"):
            seen.append(await ctx.step.run(f"item:{item}", lambda item=item: item))

    loop_job.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.outcome is durajobs.Outcome.COMPLETED
    assert seen == ["a", "b"]


def test_a_step_fn_that_hands_back_a_coroutine_is_awaited(database_url):
    registry = durajobs.Registry(database_url=database_url)

    async def fetch() -> dict[str, int]:
        await asyncio.sleep(0)
        return {"v": 1}

    @declare(registry, "coro")
    async def coro_job(ctx):
        return await ctx.step.run("fetch", lambda: fetch())

    coro_job.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.outcome is durajobs.Outcome.COMPLETED
    assert execution.result == {"v": 1}


def test_a_first_run_answers_the_stored_form_of_a_step(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "tuple")
    async def tuple_job(ctx):
        return await ctx.step.run("pair", lambda: (1, 2))

    tuple_job.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.result == [1, 2]  # what a replay reads back, on the first run too


def test_a_run_parked_by_a_step_under_a_drain_stays_parked(database_url):
    registry = durajobs.Registry(database_url=database_url)
    signal = CancelSignal()

    @declare(registry, "napper")
    async def napper(ctx):
        await ctx.step.sleep("nap", "1h")

    job = napper.enqueue({"key": "k"})

    class DrainAfterTheSleepIsStored:
        """SIGTERM lands right after the sleep step's write, before the settle."""

        def __init__(self, db):
            self.db = db

        async def run(self, call):
            answer = await self.db.run(call)
            if call.function == "jobs.record_step_v1":
                signal.cancel(Draining("deploy"))
            return answer

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            (claimed,) = await db.run(calls.claim(["default"], "w"))
            return await run_attempt(
                claimed,
                registry,
                db=DrainAfterTheSleepIsStored(db),
                signal=signal,
                lease=HeldLease(),
            )

    execution = asyncio.run(scenario())
    assert signal.is_set
    assert execution.outcome is durajobs.Outcome.SUSPENDED
    assert _row(database_url, job.id)[:2] == ("suspended", 0)


def test_a_cancel_found_by_a_step_write_is_a_cancel(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "late")
    async def late(ctx):
        await ctx.step.run("after-cancel", lambda: 1)

    job = late.enqueue({"key": "k"})

    def cancel(claimed):
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute("select jobs.cancel(%s)", [claimed.id])

    execution = asyncio.run(_execute_one(database_url, registry, before=cancel))
    assert execution.outcome is durajobs.Outcome.CANCELLED
    assert _row(database_url, job.id)[0] == "cancelled"


def test_a_drain_after_stop_still_bounds_the_wait(database_url):
    registry = durajobs.Registry(database_url=database_url)
    started: list[bool] = []

    @declare(registry, "long")
    async def long(ctx):
        started.append(True)
        await asyncio.sleep(60)

    job = long.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    settling = asyncio.Event()
    real_settle_held = worker._settle_held

    async def noted_settle_held():
        settling.set()
        await real_settle_held()

    worker._settle_held = noted_settle_held  # type: ignore[method-assign]

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: started, what="the body start")
        worker.stop()  # wait for held work...
        async with asyncio.timeout(10):
            await settling.wait()  # run() waits on the held attempt, with no deadline yet
        worker.drain()  # ...until SIGTERM arrives
        await asyncio.wait_for(runner, 10)

    asyncio.run(scenario())
    assert _row(database_url, job.id)[:2] == ("ready", 0)


def test_as_async_stamps_the_actor(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "acted")
    async def acted(ctx):
        return None

    job = asyncio.run(acted.as_async(Actor("user-1", "org-9"), {"key": "k"}))
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "select tenant_id, enqueued_by from jobs.jobs where id = %s", [job.id]
        ).fetchone()
    assert row == ("org-9", "user-1")
    with pytest.raises(TypeError):
        acted.as_(Actor("u", "o"), {"key": "k2"}, quueue="typo")  # type: ignore[call-arg]


def test_a_zero_delay_means_now(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "now")
    async def now(ctx):
        return None

    job = now.enqueue({"key": "k"}, delay=0)
    assert _row(database_url, job.id)[0] == "ready"


def test_a_coroutine_handed_back_past_its_step_timeout_is_a_timeout(database_url):
    registry = durajobs.Registry(database_url=database_url)

    async def slow() -> int:
        await asyncio.sleep(5)
        return 1

    @declare(registry, "slow-lambda", step_timeout="100ms")
    async def slow_lambda(ctx):
        await ctx.step.run("call", lambda: slow())

    job = slow_lambda.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.code == "X_JOB_TIMEOUT"
    assert "'call'" in (execution.error or "")
    assert _row(database_url, job.id)[2] == "X_JOB_TIMEOUT"


def test_a_lease_loss_found_by_a_step_write_is_logged_once(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "taken")
    async def taken(ctx):
        await ctx.step.run("write", lambda: 1)

    taken.enqueue({"key": "k"})

    def take_over(claimed):
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(
                "update jobs.jobs set lease_expires_at = now() - interval '1 second' where id = %s",
                [claimed.id],
            )
            durajobs.execute(connection, calls.claim(["default"], "other"))

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        execution = asyncio.run(_execute_one(database_url, registry, before=take_over))
    assert execution.outcome is durajobs.Outcome.LEASE_LOST
    lost = [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]
    assert [getattr(r, "reason", None) for r in lost] == ["fenced"]


def test_an_enqueue_into_an_unmigrated_database_names_durajobs_migrate(empty_database_url):
    registry = durajobs.Registry(database_url=empty_database_url)

    @declare(registry, "early")
    async def early(ctx):
        return None

    with pytest.raises(durajobs.errors.SchemaVersionMismatch, match="durajobs migrate"):
        early.enqueue({"key": "k"})
    with pytest.raises(durajobs.errors.SchemaVersionMismatch, match="durajobs migrate"):
        asyncio.run(early.enqueue_async({"key": "k"}))


def test_why_a_job_stopped_is_in_the_log_with_its_verdict(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)

    class Refused(durajobs.DurajobsError):
        code = "X_TEST_EDGE_REFUSED"

    durajobs.register_error_class(Refused.code, durajobs.ErrorClass.TERMINAL)

    @declare(registry, "refused", retry=RetryPolicy.of(attempts=5))
    async def refused(ctx):
        raise Refused("the other side said no")

    refused.enqueue({"key": "k"})
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        asyncio.run(_execute_one(database_url, registry))
    (failed,) = [r for r in caplog.records if r.getMessage() == "jobs.attempt.failed"]
    assert (failed.stop, failed.code, failed.attempt) == ("terminal", "X_TEST_EDGE_REFUSED", 1)


def test_the_final_attempt_is_told_to_the_body(database_url):
    registry = durajobs.Registry(database_url=database_url)
    seen: list[tuple[int, bool]] = []

    @declare(registry, "last", retry=RetryPolicy.of(attempts=2, delay="10ms", jitter=False))
    async def last(ctx):
        seen.append((ctx.attempt, ctx.final_attempt))
        raise RuntimeError("again")

    last.enqueue({"key": "k"})
    asyncio.run(_execute_one(database_url, registry))
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update jobs.jobs set run_at = now()")
    asyncio.run(_execute_one(database_url, registry))
    assert seen == [(1, False), (2, True)]


def test_a_late_body_is_logged_as_abandoned(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)

    returned = threading.Event()

    @declare(registry, "late-body", timeout="100ms")
    def late_body(ctx):
        import time

        time.sleep(1.0)  # ignores ctx.cancelled
        returned.set()

    late_body.enqueue({"key": "k"})

    async def scenario():
        execution = await _execute_one(database_url, registry)
        # the body finishes after its attempt ended, and is reported then
        await eventually(
            lambda: (
                returned.is_set()
                and "jobs.timeout.abandoned" in [r.getMessage() for r in caplog.records]
            ),
            timeout=5,
            what="the late body's return and its report",
        )
        return execution

    with caplog.at_level(logging.WARNING, logger="durajobs"):
        execution = asyncio.run(scenario())
    assert execution.code == "X_JOB_TIMEOUT"
    assert [r.getMessage() for r in caplog.records].count("jobs.timeout.abandoned") == 1


def test_an_ack_that_matches_nothing_is_logged_unowned(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "unowned")
    async def unowned(ctx):
        with psycopg.connect(database_url, autocommit=True) as connection:
            # another claim takes the row over while the body runs (R39)
            connection.execute(
                "update jobs.jobs set lease_expires_at = now() - interval '1 second'"
            )
            durajobs.execute(connection, calls.claim(["default"], "w"))

    unowned.enqueue({"key": "k"})
    with caplog.at_level(logging.WARNING, logger="durajobs"):
        execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.outcome is durajobs.Outcome.UNOWNED
    assert "jobs.settle.unowned" in [r.getMessage() for r in caplog.records]


def test_the_attempt_deadline_reaches_a_step_fns_signal(database_url):
    registry = durajobs.Registry(database_url=database_url)
    told: list[str] = []

    @declare(registry, "deadline-step", timeout="150ms")
    def deadline_step(ctx):
        def slow(signal):
            if signal.wait(5):
                told.append(signal.reason.code)

        ctx.step.run("slow", slow)

    deadline_step.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.code == "X_JOB_TIMEOUT"
    import time

    deadline = time.monotonic() + 5
    while not told and time.monotonic() < deadline:
        time.sleep(0.02)
    assert told == ["X_JOB_TIMEOUT"]  # the run's deadline, not a step_timeout


def test_a_wrapped_async_handler_runs_as_async(database_url):
    import functools

    registry = durajobs.Registry(database_url=database_url)
    ran: list[object] = []

    def logged(handler):
        @functools.wraps(handler)
        def wrapper(ctx):
            return handler(ctx)

        return wrapper

    @declare(registry, "wrapped")
    @logged
    async def wrapped(ctx):
        ran.append(await ctx.step.run("s", lambda: 7))

    wrapped.enqueue({"key": "k"})
    execution = asyncio.run(_execute_one(database_url, registry))
    assert execution.outcome is durajobs.Outcome.COMPLETED
    assert ran == [7]


def test_a_plain_def_returning_a_coroutine_is_refused_not_run_on_the_loop(database_url):
    registry = durajobs.Registry(database_url=database_url)

    async def body(ctx):
        return await ctx.step.run("s", lambda: 1)

    @declare(registry, "unwrapped", retry=RetryPolicy.of(attempts=3))
    def unwrapped(ctx):  # no functools.wraps: it looks like a plain def
        return body(ctx)

    job = unwrapped.enqueue({"key": "k"})
    execution = asyncio.run(asyncio.wait_for(_execute_one(database_url, registry), 10))
    assert execution.code == "X_JOB_DECLARATION_INVALID"
    assert _row(database_url, job.id)[0] == "dead"  # terminal: a retry cannot fix a declaration


def test_a_history_that_cannot_be_read_hands_the_run_back_uncounted(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "history")
    async def history(ctx):
        return None

    job = history.enqueue({"key": "k"})

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            (claimed,) = await db.run(calls.claim(["default"], "w"))
            claimed = dataclasses.replace(claimed, has_steps=True)  # as if it had a history
            real_run = db.run

            async def broken_history(call):
                if call.function == "jobs.steps_v1":
                    raise psycopg.OperationalError("the pool timed out")
                return await real_run(call)

            db.run = broken_history  # type: ignore[method-assign]
            return await run_attempt(
                claimed, registry, db=db, signal=CancelSignal(), lease=HeldLease()
            )

    execution = asyncio.run(scenario())
    assert execution.outcome is durajobs.Outcome.INTERRUPTED
    assert _row(database_url, job.id)[:2] == ("ready", 0)


def test_a_naive_run_at_is_refused(database_url):
    from datetime import datetime

    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "naive")
    async def naive(ctx):
        return None

    with pytest.raises(durajobs.errors.ArgumentInvalid, match="time zone"):
        naive.enqueue({"key": "k"}, run_at=datetime(2030, 1, 1, 9, 0))


def test_a_translated_error_keeps_the_driver_error_as_its_cause(client):
    with pytest.raises(durajobs.errors.ArgumentInvalid) as raised:
        client.enqueue("n", {}, "k", max_attempts=0)
    assert isinstance(raised.value.__cause__, psycopg.Error)
    assert raised.value.__cause__.sqlstate == "JQ001"


def test_a_first_attempt_without_steps_reads_no_history_and_a_resumed_run_does(database_url):
    """claim_v1 tells whether the run has stored steps: the read is skipped only when empty."""
    registry = durajobs.Registry(database_url=database_url)
    ran: list[int] = []

    @declare(registry, "stepper")
    async def stepper(ctx):
        await ctx.step.run("once", lambda: ran.append(ctx.attempt) or 1)
        if ctx.attempt == 1:
            raise RuntimeError("again")

    stepper.enqueue({"key": "k"})

    async def attempt() -> list[str]:
        async with AsyncDatabase(database_url) as db:
            (claimed,) = await db.run(calls.claim(["default"], "w"))
            functions: list[str] = []
            real_run = db.run

            async def recording(call):
                functions.append(call.function)
                return await real_run(call)

            db.run = recording  # type: ignore[method-assign]
            await run_attempt(claimed, registry, db=db, signal=CancelSignal(), lease=HeldLease())
            return functions

    first = asyncio.run(attempt())
    assert "jobs.steps_v1" not in first
    _promote_all(database_url)
    second = asyncio.run(attempt())
    assert "jobs.steps_v1" in second
    assert ran == [1], "the stored step replayed instead of running again"


def _promote_all(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update jobs.jobs set run_at = now() where state = 'ready'")


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_step_that_ran_to_its_end_under_a_drain_is_kept_not_run_again(database_url, kind):
    """SIGTERM while a step's function runs in a thread: the drain waits for it (a thread cannot
    be stopped), and what it did is stored before the attempt is handed back, so the next
    attempt replays the step instead of charging again."""
    from support.running import run_until

    registry = durajobs.Registry(database_url=database_url)
    charged: list[str] = []
    in_step = threading.Event()
    release = threading.Event()

    def charge() -> dict[str, bool]:
        in_step.set()
        release.wait(10)
        charged.append("charge")
        return {"charged": True}

    if kind == "async":

        @declare(registry, "pay")
        async def pay(ctx):
            await ctx.step.run("charge", charge)

    else:

        @declare(registry, "pay")
        def pay(ctx):
            ctx.step.run("charge", charge)

    job = pay.enqueue({"key": "k"})
    draining = Worker(registry, database_url, listen=False)

    async def drained_mid_step() -> None:
        running = asyncio.ensure_future(draining.run())
        assert await asyncio.to_thread(in_step.wait, 10), "the step never began"
        draining.drain()
        await asyncio.sleep(0.1)  # the drain has reached the attempt
        release.set()
        await asyncio.wait_for(running, 20)

    asyncio.run(drained_mid_step())
    assert _row(database_url, job.id)[:2] == ("ready", 0), "handed back, uncounted"
    with psycopg.connect(database_url, autocommit=True) as connection:
        steps = connection.execute(
            "select name, status, output from jobs.steps where run_id = %s", [job.run_id]
        ).fetchall()
    assert steps == [("charge", "completed", {"charged": True})]

    finishing = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(finishing, lambda: _row(database_url, job.id)[0] == "done"))
    assert charged == ["charge"], "the kept step was replayed, not run again"
