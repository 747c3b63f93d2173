"""The worker loop in process, against a real database: fairness, backoff, wake, leases, drain."""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import threading
import time
from datetime import timedelta

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import ConfigInvalid
from durajobs.runtime import claimer
from durajobs.runtime.worker import Worker
from support.dropped_cancel import CancelDropper, cancel_once_while_parked
from support.events import recorded
from support.factory import declare
from support.models import Numbered, TimedItem
from support.outbox import eventually
from support.rows import fetch_all
from support.running import run_until

# the advisory lock a test holds while the worker's pooled connections wait on it
HOLD_LOCK = 42_4242


def _registry(database_url):
    return durajobs.Registry(database_url=database_url)


def _body_that_notes_its_cancel(registry, name, seen, *, attempts=None):
    """Declare an async job that notes when it starts and when it is cancelled."""
    retry = {} if attempts is None else {"retry": RetryPolicy.of(attempts=attempts)}

    @declare(registry, name, input=TimedItem, **retry)
    async def body(ctx):
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    return body


async def _run_until_started(worker, seen):
    """Start `worker.run()` and answer its task once a body has noted "started"."""
    runner = asyncio.ensure_future(worker.run())

    def started() -> bool:
        assert not runner.done(), runner
        return "started" in seen

    await eventually(started, what="a body start")
    return runner


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_invalid_caps_are_refused_at_construction(database_url, bad):
    registry = _registry(database_url)

    @declare(registry, "n", input=TimedItem)
    def n(ctx):
        return None

    with pytest.raises(ConfigInvalid):
        Worker(registry, database_url, max_in_flight=bad)
    with pytest.raises(ConfigInvalid):
        Worker(registry, database_url, concurrency=bad)


def test_concurrency_tables_are_read_by_own_key(database_url):
    registry = _registry(database_url)
    worker = Worker(
        registry,
        database_url,
        queues=["constructor", "__class__", "keys", "other"],
        concurrency={"constructor": 2, "__class__": 1, "keys": 3},
    )
    assert worker.concurrency == {"constructor": 2, "__class__": 1, "keys": 3, "other": 8}


def test_three_backlogged_queues_on_a_cap_of_one_take_turns(database_url):
    registry = _registry(database_url)
    order: list[str] = []

    for queue in ("a", "b", "c"):

        @declare(registry, f"job-{queue}", input=TimedItem, queue=queue)
        async def handler(ctx):
            order.append(ctx.queue)

    # queue a's backlog is the oldest: a plain oldest-first claim would drain it first
    for queue in ("a", "b", "c"):
        for n in range(3):
            registry.get(f"job-{queue}").enqueue({"key": f"{queue}{n}"})

    worker = Worker(registry, database_url, queues=["a", "b", "c"], max_in_flight=1, listen=False)
    asyncio.run(run_until(worker, lambda: len(order) == 9))
    assert order == ["a", "b", "c"] * 3


def test_idle_backoff_doubles_to_the_ceiling(database_url):
    registry = _registry(database_url)
    worker = Worker(
        registry,
        database_url,
        queues=["quiet"],
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=80),
    )
    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        asyncio.run(run_until(worker, lambda: len(idle) >= 6))
    assert [event["wait"] for event in idle[:6]] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]


def test_a_wake_from_another_session_starts_an_idle_worker_at_once(database_url):
    registry = _registry(database_url)
    started: list[float] = []

    @declare(registry, "woken", input=TimedItem)
    async def woken(ctx):
        started.append(time.monotonic())

    # an idle ceiling of a minute: only the wake can start the job within the test's bound
    worker = Worker(
        registry,
        database_url,
        listen=True,
        idle_ceiling=timedelta(minutes=1),
        woken_idle_ceiling=timedelta(minutes=1),
        poll_floor=timedelta(seconds=30),
    )

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        for _ in range(200):
            if worker._wake is not None and worker._wake.proven and idle:
                break
            await asyncio.sleep(0.02)
        assert worker._wake is not None
        assert worker._wake.proven
        enqueued = time.monotonic()
        await asyncio.to_thread(woken.enqueue, {"key": "now"})
        for _ in range(250):
            if started:
                break
            await asyncio.sleep(0.02)
        worker.stop()
        await runner
        return started[0] - enqueued if started else None

    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        latency = asyncio.run(scenario())
    assert latency is not None, "the wake did not start the job"
    assert latency < 5.0, "the wake did not start the job before the poll"


def test_a_long_job_never_blocks_the_free_slots(database_url):
    registry = _registry(database_url)
    quick_done: list[str] = []

    @declare(registry, "long", input=TimedItem)
    async def long(ctx):
        await asyncio.sleep(ctx.input.seconds)

    @declare(registry, "quick", input=TimedItem)
    async def quick(ctx):
        quick_done.append(ctx.input.key)

    long.enqueue({"key": "long", "seconds": 30})
    for n in range(20):
        quick.enqueue({"key": f"q{n}"})
    worker = Worker(registry, database_url, concurrency=2, listen=False)

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        for _ in range(500):
            if len(quick_done) == 20:
                break
            await asyncio.sleep(0.02)
        for _ in range(250):  # the last quick job settles
            if worker.stats().in_flight == 1:
                break
            await asyncio.sleep(0.02)
        still_running = worker.stats().in_flight
        long_state = await asyncio.to_thread(
            fetch_all, database_url, "select state from jobs.jobs where name = 'long'"
        )
        worker.drain()
        await runner
        return still_running, long_state

    # every quick job ran while the long one was still running, alone
    assert asyncio.run(scenario()) == (1, [("running",)])
    assert len(quick_done) == 20


def test_a_claim_pass_that_fails_never_kills_the_loop(database_url, caplog):
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "after", input=TimedItem)
    async def after(ctx):
        ran.append(ctx.input.key)

    after.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    real_run = worker.db.run
    failures = {"left": 1}

    async def flaky(call):
        if call.function == "jobs.claim_v1" and failures["left"]:
            failures["left"] -= 1
            raise psycopg.OperationalError("the pool blinked")
        return await real_run(call)

    worker.db.run = flaky  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: ran == ["k"]))
    assert any(r.getMessage() == "jobs.worker.claim-failed" for r in caplog.records)


def test_a_retry_due_within_a_minute_gets_a_local_timer(database_url):
    registry = _registry(database_url)
    attempts: list[float] = []

    @declare(
        registry,
        "flaky",
        input=TimedItem,
        retry=RetryPolicy.of(attempts=3, delay="300ms", jitter=False),
    )
    async def flaky(ctx):
        attempts.append(time.monotonic())
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    flaky.enqueue({"key": "k"})
    # a poll floor and idle ceiling of a minute: only the local timer can bring the retry back
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(minutes=1),
        idle_ceiling=timedelta(minutes=1),
    )
    asyncio.run(run_until(worker, lambda: len(attempts) == 2, timeout=20))
    assert attempts[1] - attempts[0] < 10


def test_heartbeats_keep_a_job_longer_than_its_lease(database_url, caplog):
    registry = _registry(database_url)
    done: list[int] = []

    @declare(registry, "longer", input=TimedItem)
    async def longer(ctx):
        await asyncio.sleep(2.0)
        done.append(ctx.attempt)

    job = longer.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: done == [1]))
    assert fetch_all(
        database_url, "select state, attempt, claims from jobs.jobs where id = %s", [job.id]
    ) == [("done", 1, 1)]
    assert not [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]


def test_a_lease_taken_after_an_idle_spell_is_renewed(database_url, caplog):
    """The renewer waits with nothing to renew once every lease it held is settled; the first
    lease held after that wakes it, or the second job's lease would run out while it runs."""
    registry = _registry(database_url)
    started: list[str] = []
    done: list[str] = []

    @declare(registry, "spell", input=TimedItem)
    async def spell(ctx):
        started.append(ctx.input.key)
        await asyncio.sleep(1.5)
        done.append(ctx.input.key)

    first = spell.enqueue({"key": "first"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    ids: list[object] = [first.id]
    held: list[object] = []

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        try:
            await eventually(lambda: done == ["first"], what="the first job done", timeout=20)
            await asyncio.sleep(0.3)  # the renewer has nothing held now
            second = await asyncio.to_thread(spell.enqueue, {"key": "second"})
            ids.append(second.id)
            await eventually(lambda: len(started) == 2, what="the second job started", timeout=20)
            await asyncio.sleep(1.0)  # past the window of the lease its claim gave it
            held.extend(
                await asyncio.to_thread(
                    fetch_all,
                    database_url,
                    "select state, lease_expires_at > now() from jobs.jobs where id = %s",
                    [second.id],
                )
            )
            await eventually(lambda: len(done) == 2, what="the second job done", timeout=20)
        finally:
            worker.stop()
            await runner

    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(scenario())
    assert held == [("running", True)], "the second job's lease was renewed while it ran"
    for id in ids:
        assert fetch_all(
            database_url, "select state, attempt, claims from jobs.jobs where id = %s", [id]
        ) == [("done", 1, 1)]
    assert not [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]


def test_the_leases_a_worker_holds_are_renewed_together(database_url):
    """One renewal statement a round for every held attempt, each fenced on its own claim: the
    five rows' leases carry one statement's clock."""
    registry = _registry(database_url)
    started: list[str] = []
    release = asyncio.Event()

    @declare(registry, "together", input=TimedItem)
    async def together(ctx):
        started.append(ctx.input.key)
        await release.wait()

    for n in range(5):
        together.enqueue({"key": f"k{n}"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=900))
    seen: dict[str, object] = {}

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        try:
            await eventually(lambda: len(started) == 5, what="all five running")
            claimed = await asyncio.to_thread(
                fetch_all, database_url, "select distinct updated_at from jobs.jobs"
            )

            def renewed() -> bool:
                rows = fetch_all(database_url, "select distinct updated_at from jobs.jobs")
                seen["rows"] = rows
                return rows != claimed

            await eventually(renewed, what="a renewal round")
            await asyncio.sleep(0.9)  # three more rounds, past the first lease's window
            seen["later"] = await asyncio.to_thread(
                fetch_all, database_url, "select state, attempt from jobs.jobs"
            )
        finally:
            release.set()
            await eventually(
                lambda: (
                    fetch_all(database_url, "select count(*) from jobs.jobs where state = 'done'")
                    == [(5,)]
                ),
                what="all five done",
            )
            worker.stop()
            await runner

    asyncio.run(scenario())
    assert len(seen["rows"]) == 1, "one statement renewed every held lease"
    assert seen["later"] == [("running", 1)] * 5, "renewed past the first window, never re-taken"


def test_a_cancel_stops_the_running_body_and_is_not_a_lease_loss(database_url, caplog):
    registry = _registry(database_url)
    seen: list[str] = []

    cancellable = _body_that_notes_its_cancel(registry, "cancellable", seen)

    job = cancellable.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))

    async def scenario():
        runner = await _run_until_started(worker, seen)
        await asyncio.to_thread(fetch_all, database_url, "select jobs.cancel(%s)", [job.id])
        await eventually(lambda: worker.stats().outcomes, what="the cancelled attempt's end")
        worker.stop()
        await runner

    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert seen == ["started", "cancelled"]
    assert worker.stats().outcomes == {durajobs.Outcome.CANCELLED: 1}
    assert "jobs.lease.cancelled" in messages
    assert "jobs.lease.lost" not in messages
    assert fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id]) == [
        ("cancelled",)
    ]


def test_a_lease_taken_by_another_claim_is_lost_once(database_url, caplog):
    registry = _registry(database_url)
    seen: list[str] = []

    stolen = _body_that_notes_its_cancel(registry, "stolen", seen)

    job = stolen.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))

    def steal():
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(
                "update jobs.jobs set lease_expires_at = now() - interval '1 second' where id = %s",
                [job.id],
            )
            durajobs.execute(connection, calls.claim(["default"], "thief"))

    async def scenario():
        runner = await _run_until_started(worker, seen)
        await asyncio.to_thread(steal)
        await eventually(lambda: worker.stats().outcomes, what="the stolen attempt's end")
        await asyncio.sleep(0.5)  # a few more heartbeat intervals: still reported once
        worker.stop()
        await runner

    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(scenario())
    lost = [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]
    assert len(lost) == 1
    assert worker.stats().outcomes == {durajobs.Outcome.LEASE_LOST: 1}
    assert fetch_all(
        database_url, "select state, claimed_by from jobs.jobs where id = %s", [job.id]
    ) == [("running", "thief")]


def test_a_final_attempt_whose_lease_lapsed_is_buried_and_reported(database_url, caplog):
    registry = _registry(database_url)
    settled: list[durajobs.Settled] = []

    @declare(
        registry,
        "crashy",
        input=TimedItem,
        retry=RetryPolicy.of(attempts=1),
        on_settled=settled.append,
    )
    async def crashy(ctx):
        return None

    job = crashy.enqueue({"key": "k"})
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.claim(["default"], "died"))
        connection.execute(
            "update jobs.jobs set lease_expires_at = now() - interval '1 second' where id = %s",
            [job.id],
        )
    worker = Worker(registry, database_url, listen=False)
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: bool(settled)))
    assert settled[0].outcome == "dead-lettered"
    assert settled[0].error == "LEASE_LAPSED_FINAL_ATTEMPT"
    assert any(r.getMessage() == "jobs.claim.exhausted" for r in caplog.records)
    assert fetch_all(
        database_url, "select state, last_error from jobs.jobs where id = %s", [job.id]
    ) == [("dead", "LEASE_LAPSED_FINAL_ATTEMPT")]


def test_drain_interrupts_held_work_without_counting_the_attempt(database_url):
    registry = _registry(database_url)
    seen: list[str] = []

    @declare(registry, "deploy-me", input=TimedItem, retry=RetryPolicy.of(attempts=1))
    async def deploy_me(ctx):
        seen.append("started")
        await asyncio.sleep(30)

    job = deploy_me.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)

    async def scenario():
        runner = await _run_until_started(worker, seen)
        worker.drain()
        await runner

    asyncio.run(scenario())
    assert worker.stats().outcomes == {durajobs.Outcome.INTERRUPTED: 1}
    assert worker.stats().interrupted == 1
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
    ) == [("ready", 0)]


@pytest.mark.parametrize("returns", [None, {"total": 3}])
@pytest.mark.parametrize("traced", [False, True])
def test_a_drain_landing_after_a_body_ended_leaves_it_to_settle_as_it_ended(
    database_url, returns, traced, monkeypatch
):
    """The drain comes in the loop turn between the body's end and its attempt's callback (or
    its settle under way): the body did not end because of the drain, so it is acked, not
    handed back to run a second time. Traced, an attempt starts in a task of its own (the
    runner's other path)."""
    from durajobs.runtime import runner

    monkeypatch.setattr(runner, "spans_active", lambda: traced)
    registry = _registry(database_url)
    runs: list[str] = []
    worker: Worker | None = None

    @declare(registry, "ends-first", input=TimedItem)
    async def ends_first(ctx):
        await asyncio.sleep(0)  # in a task of its own: its end reaches the runner a turn later
        runs.append("ran")
        assert worker is not None
        asyncio.get_running_loop().call_soon(worker.drain)  # before the task's done callback
        return returns

    job = ends_first.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    asyncio.run(worker.run())

    assert runs == ["ran"]
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
    ) == [("done", 1)]
    assert worker.stats().outcomes == {durajobs.Outcome.COMPLETED: 1}


@pytest.mark.parametrize("first_nack_fails", [False, True])
def test_a_drain_in_the_turn_a_full_batch_sends_its_next_claim_starts_none_of_it(
    database_url, first_nack_fails
):
    """A full batch sends the next claim and yields one turn before it starts its rows; a drain
    landing in that turn signalled only the attempts already held, so the batch ran unsignalled.
    The rows go back uncounted instead; one whose hand-back fails is given back at teardown,
    not left to its lease (a counted attempt that never ran)."""
    registry = _registry(database_url)
    runs: list[int] = []

    @declare(registry, "batched", input=Numbered, idempotency_key=lambda i: str(i.n), queue="a")
    async def batched(ctx):
        runs.append(ctx.input.n)

    for n in range(8):
        batched.enqueue({"n": n})
    # a claim of queue "a" fills its 4 slots while the worker has 8: the next claim goes ahead
    worker = Worker(registry, database_url, listen=False, queues=["a", "b"], concurrency=4)
    claims = worker._claims
    real_pass, real_run = claims._pass, worker.db.run
    passes = {"n": 0}
    failing = {"left": 1 if first_nack_fails else 0}

    async def pass_draining_when_sent_ahead() -> int:
        passes["n"] += 1
        if passes["n"] == 2:  # the claim sent ahead of the first batch's start
            worker.drain()
        return await real_pass()

    async def run(call):
        if call.function == "jobs.nack_v1" and failing["left"]:
            failing["left"] -= 1
            raise psycopg.OperationalError("connection reset")
        return await real_run(call)

    claims._pass = pass_draining_when_sent_ahead  # type: ignore[method-assign]
    worker.db.run = run  # type: ignore[method-assign]
    asyncio.run(worker.run())

    assert runs == [], "no row of the batch started"
    assert fetch_all(
        database_url, "select state, attempt, count(*) from jobs.jobs group by 1, 2"
    ) == [("ready", 0, 8)]


def test_stop_lets_held_work_finish(database_url):
    registry = _registry(database_url)
    seen: list[str] = []

    @declare(registry, "finish-me", input=TimedItem)
    async def finish_me(ctx):
        seen.append("started")
        await asyncio.sleep(0.5)
        seen.append("finished")

    job = finish_me.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)

    async def scenario():
        runner = await _run_until_started(worker, seen)
        worker.stop()
        await runner

    asyncio.run(scenario())
    assert seen == ["started", "finished"]
    assert fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id]) == [
        ("done",)
    ]


def test_a_body_ignoring_the_drain_is_abandoned_at_the_deadline(database_url, caplog):
    registry = _registry(database_url)
    seen: list[str] = []

    @declare(registry, "stubborn", input=TimedItem)
    def stubborn(ctx):
        seen.append("started")
        time.sleep(2)  # ignores ctx.cancelled

    job = stubborn.enqueue({"key": "k"})
    worker = Worker(
        registry, database_url, listen=False, drain_deadline=timedelta(milliseconds=300)
    )

    async def scenario():
        runner = await _run_until_started(worker, seen)
        worker.drain()
        await runner

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        asyncio.run(scenario())
    assert any(r.getMessage() == "jobs.worker.drain-abandoned" for r in caplog.records)
    # nobody settled it: the lease brings it back
    assert fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id]) == [
        ("running",)
    ]


def test_a_job_this_deploy_does_not_know_is_parked(database_url):
    registry = _registry(database_url)

    @declare(registry, "known", input=TimedItem)
    async def known(ctx):
        return None

    with psycopg.connect(database_url, autocommit=True) as connection:
        unknown = durajobs.execute(connection, calls.enqueue("from-the-future", {}, "k"))
    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, lambda: bool(worker.stats().outcomes)))
    assert worker.stats().outcomes == {durajobs.Outcome.PARKED: 1}
    state, attempt, last_error, later = fetch_all(
        database_url,
        "select state, attempt, last_error, run_at > now() + interval '20 seconds'"
        " from jobs.jobs where id = %s",
        [unknown.id],
    )[0]
    assert (state, attempt, later) == ("suspended", 0, True)
    assert last_error == 'no job registered as "from-the-future"'


def test_a_hung_heartbeat_is_a_lost_lease_after_one_window(database_url, caplog):
    """R37: a renewal that never answers is caught on this process's clock."""
    registry = _registry(database_url)
    seen: list[str] = []

    hung = _body_that_notes_its_cancel(registry, "hung", seen)

    hung.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    real_run = worker.settle_db.run

    async def hanging(call):
        if call.function == "jobs.heartbeat_many_v1":
            await asyncio.Event().wait()  # never answers
        return await real_run(call)

    worker.settle_db.run = hanging  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: bool(worker.stats().outcomes)))
    assert seen[:2] == ["started", "cancelled"]
    outcomes = worker.stats().outcomes
    assert outcomes.get(durajobs.Outcome.LEASE_LOST, 0) >= 1
    # the row's lease really lapsed, so it may be re-taken meanwhile: one report per lost attempt
    lost = [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]
    assert {getattr(r, "reason", None) for r in lost} == {"expired"}
    assert len(lost) == outcomes[durajobs.Outcome.LEASE_LOST]


def test_a_renewal_racing_the_ack_is_not_a_loss(database_url, caplog):
    """R35: a heartbeat still on the wire when the ack lands answers 'lost': not reported."""
    registry = _registry(database_url)

    @declare(registry, "racy", input=TimedItem)
    async def racy(ctx):
        await asyncio.sleep(0.25)

    for n in range(5):
        racy.enqueue({"key": f"k{n}"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    real_run = worker.settle_db.run

    async def slow_heartbeat(call):
        if call.function == "jobs.heartbeat_many_v1":
            await asyncio.sleep(0.2)  # the ack overtakes it
        return await real_run(call)

    worker.settle_db.run = slow_heartbeat  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: sum(worker.stats().outcomes.values()) == 5))
    assert worker.stats().outcomes == {durajobs.Outcome.COMPLETED: 5}
    assert not [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]


def test_a_slow_on_settled_hook_is_not_a_lease_loss(database_url, caplog):
    """R36: the lease stops when the settle is sent, not when the hook returns."""
    registry = _registry(database_url)
    hooked: list[str] = []

    async def slow_hook(settled):
        await asyncio.sleep(0.6)  # two heartbeat intervals
        hooked.append(settled.outcome)

    @declare(registry, "hooked", input=TimedItem, on_settled=slow_hook)
    async def hooked_job(ctx):
        return None

    hooked_job.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: hooked == ["completed"]))
    assert not [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]


def test_a_renewal_without_an_answer_for_a_lease_is_retried_not_a_loss(database_url, caplog):
    """R91: only an explicit 'lost' ends an attempt. A batch renewal whose answer leaves a held
    lease out (never the SQL's way) is tried again, like a renewal that failed."""
    registry = _registry(database_url)
    ran: list[int] = []

    @declare(registry, "long", input=TimedItem)
    async def long_job(ctx):
        await asyncio.sleep(1.5)  # several renewals of a 600 ms lease
        ran.append(ctx.attempt)

    long_job.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    real_run = worker.settle_db.run
    dropped: list[object] = []

    async def first_renewal_unanswered(call):
        answer = await real_run(call)
        if call.function == "jobs.heartbeat_many_v1" and not dropped and answer:
            dropped.extend(answer)
            return {}  # the renewal landed, but its answer says nothing of the lease
        return answer

    worker.settle_db.run = first_renewal_unanswered  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: ran == [1]))
    assert dropped, "no renewal was made"
    assert not [r for r in caplog.records if r.getMessage() == "jobs.lease.lost"]
    unanswered = [r for r in caplog.records if r.getMessage() == "jobs.heartbeat.failed"]
    assert [getattr(r, "error", None) for r in unanswered] == ["no answer for this lease"]


def test_the_poll_still_runs_jobs_when_the_listener_is_lost(database_url):
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "polled", input=TimedItem)
    async def polled(ctx):
        ran.append(ctx.input.key)

    worker = Worker(
        registry,
        database_url,
        listen=True,
        poll_floor=timedelta(milliseconds=50),
        idle_ceiling=timedelta(milliseconds=400),
        woken_idle_ceiling=timedelta(milliseconds=400),
    )

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        for _ in range(200):
            if worker._wake is not None and worker._wake.proven:
                break
            await asyncio.sleep(0.02)
        listener_pid = worker._wake._connection.info.backend_pid  # type: ignore[union-attr]
        await asyncio.to_thread(
            fetch_all, database_url, "select pg_terminate_backend(%s)", [listener_pid]
        )
        await asyncio.to_thread(polled.enqueue, {"key": "after-the-loss"})
        for _ in range(250):
            if ran:
                break
            await asyncio.sleep(0.02)
        worker.stop()
        await runner

    asyncio.run(scenario())
    assert ran == ["after-the-loss"]


def test_a_wake_listening_again_makes_up_for_what_it_missed_while_down(database_url):
    """A job enqueued while the LISTEN session is being re-made sends its wake to nobody; with
    the poll 20 s away, only a wake of each queue once listening again picks it up soon."""
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "missed", input=TimedItem)
    async def missed(ctx):
        ran.append(ctx.input.key)

    worker = Worker(
        registry,
        database_url,
        listen=True,
        poll_floor=timedelta(seconds=20),
        idle_ceiling=timedelta(seconds=30),
        woken_idle_ceiling=timedelta(seconds=30),
    )

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        for _ in range(200):
            if worker._wake is not None and worker._wake.proven:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # the first passes are done: the loop waits out its poll
        listener_pid = worker._wake._connection.info.backend_pid  # type: ignore[union-attr]
        await asyncio.to_thread(
            fetch_all, database_url, "select pg_terminate_backend(%s)", [listener_pid]
        )
        await asyncio.to_thread(missed.enqueue, {"key": "while-down"})
        for _ in range(500):  # 10 s: the reconnect takes one
            if ran:
                break
            await asyncio.sleep(0.02)
        worker.stop()
        await runner

    asyncio.run(scenario())
    assert ran == ["while-down"]


def test_a_drain_during_a_claim_hands_the_claimed_rows_back(database_url):
    """R100: rows a claim brings back after the drain began are handed back, uncounted."""
    registry = _registry(database_url)

    @declare(registry, "raced", input=TimedItem)
    async def raced(ctx):
        raise AssertionError("nothing may start after the drain")

    for n in range(3):
        raced.enqueue({"key": f"k{n}"})
    worker = Worker(registry, database_url, listen=False)
    real_run = worker.db.run

    async def drain_mid_claim(call):
        answer = await real_run(call)
        if call.function == "jobs.claim_v1" and answer:
            worker.drain()  # SIGTERM lands while the claim was on the wire
        return answer

    worker.db.run = drain_mid_claim  # type: ignore[method-assign]
    asyncio.run(worker.run())
    assert (
        fetch_all(database_url, "select state, attempt from jobs.jobs order by id")
        == [("ready", 0)] * 3
    )


@pytest.mark.parametrize("cancels", [1, 2])
def test_a_cancel_during_a_claim_hands_the_claimed_rows_back(database_url, cancels):
    # a claim's statement can commit just before the cancel of the worker's task reaches it:
    # the answer was thrown away and the rows stayed running under a gone worker until their
    # leases lapsed, each a counted attempt (a last attempt dead-lettered, never run)
    registry = _registry(database_url)

    @declare(registry, "cut", input=TimedItem, retry=RetryPolicy.of(attempts=1))
    async def cut(ctx):
        raise AssertionError("nothing may start after the cancel")

    for n in range(3):
        cut.enqueue({"key": f"k{n}"})
    worker = Worker(registry, database_url, listen=False)
    real_run = worker.db.run
    answered = asyncio.Event()

    async def answer_in_transit(call):
        answer = await real_run(call)
        if call.function == "jobs.claim_v1" and answer:
            answered.set()
            await asyncio.sleep(1)  # committed on the server, the answer still on its way
        return answer

    worker.db.run = answer_in_transit  # type: ignore[method-assign]

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        async with asyncio.timeout(10):
            await answered.wait()
        for _ in range(cancels):
            runner.cancel()
            await asyncio.sleep(0)
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await runner
        # a second cancel returns at once; the shielded teardown goes on (asyncio.run would
        # cancel it on leaving)
        async with asyncio.timeout(10):
            while not worker.db.pool.closed:
                await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert (
        fetch_all(database_url, "select state, attempt from jobs.jobs order by id")
        == [("ready", 0)] * 3
    )


def test_a_listener_that_never_hears_its_probe_stays_unverified(database_url, caplog):
    """R59: a proxy that swallows LISTEN must not raise the idle ceiling."""
    from durajobs.runtime.wake import QueueWake

    def judged() -> bool:
        messages = {r.getMessage() for r in caplog.records}
        return bool(messages & {"jobs.wake.unverified", "jobs.wake.live"})

    async def scenario():
        async def swallowed(token):
            return None  # the probe never reaches the listener

        wake = QueueWake(database_url, {"t": "default"}, lambda queue: None, swallowed)
        wake.start()
        # the probe's 2 s window ends in a verdict: unverified (or, wrongly, live)
        await eventually(judged, timeout=10, what="the probe's verdict")
        proven = wake.proven
        await wake.stop()
        return proven

    with caplog.at_level(logging.INFO, logger="durajobs"):
        assert asyncio.run(scenario()) is False
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("jobs.wake.unverified") == 1
    assert "jobs.wake.live" not in messages


def test_a_proven_wake_raises_the_idle_ceiling(database_url):
    registry = _registry(database_url)
    worker = Worker(
        registry,
        database_url,
        queues=["quiet"],
        listen=True,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=40),
        woken_idle_ceiling=timedelta(milliseconds=160),
    )

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        for _ in range(200):
            if worker._wake is not None and worker._wake.proven:
                break
            await asyncio.sleep(0.02)
        proven_at = len(idle)
        await eventually(
            lambda: 0.16 in [event["wait"] for event in idle[proven_at:]],
            timeout=5,
            what="a raised idle wait",
        )
        worker.stop()
        await runner
        return [event["wait"] for event in idle[proven_at:]]

    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        waits = asyncio.run(scenario())
    assert 0.16 in waits


def test_a_queue_no_job_names_is_polled_and_reported_once(database_url, caplog):
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "rerouted", input=TimedItem)
    async def rerouted(ctx):
        ran.append(ctx.queue)

    rerouted.enqueue({"key": "k"}, queue="elsewhere")
    worker = Worker(registry, database_url, queues=["elsewhere"], listen=False)
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: ran == ["elsewhere"]))
    reports = [r for r in caplog.records if r.getMessage() == "jobs.worker.queue-unregistered"]
    assert [getattr(r, "queue", None) for r in reports] == ["elsewhere"]


def test_an_ack_that_fails_is_not_a_job_failure(database_url, caplog):
    """R101: settling is not part of the retry decision; the lease brings the job back."""
    registry = _registry(database_url)

    @declare(registry, "acked", input=TimedItem)
    async def acked(ctx):
        return None

    job = acked.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    real_run = worker.settle_db.run

    async def failing_ack(call):
        if call.function in ("jobs.ack_v1", "jobs.ack_many_v1"):  # the worker batches its acks
            raise psycopg.OperationalError("connection reset while acking")
        return await real_run(call)

    worker.settle_db.run = failing_ack  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: bool(worker.stats().outcomes)))
    assert worker.stats().outcomes == {durajobs.Outcome.UNOWNED: 1}
    assert any(r.getMessage() == "jobs.settle.failed" for r in caplog.records)
    assert fetch_all(
        database_url, "select state, attempt, last_error from jobs.jobs where id = %s", [job.id]
    ) == [("running", 1, None)]


def test_a_sleep_due_within_a_minute_resumes_on_a_local_timer(database_url):
    registry = _registry(database_url)
    finished: list[str] = []

    @declare(registry, "napper", input=TimedItem)
    async def napper(ctx):
        await ctx.step.sleep("nap", "300ms")
        finished.append(ctx.input.key)

    napper.enqueue({"key": "k"})
    # a poll floor and idle ceiling of a minute: only the local timer resumes it in time
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(minutes=1),
        idle_ceiling=timedelta(minutes=1),
    )
    asyncio.run(run_until(worker, lambda: finished == ["k"], timeout=15))


def test_a_heartbeat_that_fails_once_is_a_warning_not_a_loss(database_url, caplog):
    """H.91: a renewal failure with room left in the window only warns."""
    registry = _registry(database_url)

    @declare(registry, "blip", input=TimedItem)
    async def blip(ctx):
        await asyncio.sleep(0.8)

    blip.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, visibility=timedelta(milliseconds=600))
    real_run = worker.settle_db.run
    failures = {"left": 1}

    async def flaky(call):
        if call.function == "jobs.heartbeat_many_v1" and failures["left"]:
            failures["left"] -= 1
            raise psycopg.OperationalError("one renewal lost on the wire")
        return await real_run(call)

    worker.settle_db.run = flaky  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="durajobs"):
        asyncio.run(run_until(worker, lambda: bool(worker.stats().outcomes)))
    messages = [r.getMessage() for r in caplog.records]
    assert "jobs.heartbeat.failed" in messages
    assert "jobs.lease.lost" not in messages
    assert worker.stats().outcomes == {durajobs.Outcome.COMPLETED: 1}


def test_a_per_queue_cap_holds_while_the_worker_runs(database_url):
    registry = _registry(database_url)
    running = {"now": 0, "most": 0}

    @declare(registry, "capped", input=TimedItem, queue="narrow")
    async def capped(ctx):
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1

    for n in range(12):
        capped.enqueue({"key": f"k{n}"})
    worker = Worker(
        registry, database_url, queues=["narrow"], concurrency={"narrow": 2}, listen=False
    )
    asyncio.run(run_until(worker, lambda: sum(worker.stats().outcomes.values()) == 12))
    assert running["most"] == 2


def _held_backlog(database_url, work):
    """A registry with a job on each of queues a, b and c that holds its slot until released,
    `work` rows enqueued on them in that order; answer the registry, the queues the bodies
    started on, and the list the release event goes into (made inside the test's loop)."""
    registry = _registry(database_url)
    started: list[str] = []
    release: list[asyncio.Event] = []
    for queue in ("a", "b", "c"):

        @declare(registry, f"hold-{queue}", input=TimedItem, queue=queue)
        async def hold(ctx):
            started.append(ctx.queue)
            await release[0].wait()

    for queue, count in zip(("a", "b", "c"), work, strict=True):
        for n in range(count):
            registry.get(f"hold-{queue}").enqueue({"key": f"{queue}{n}"})
    return registry, started, release


def _first_pass_claims(worker):
    """Count the rows each claim of the worker's first pass answers: the list they go into."""
    real_run = worker.db.run
    answered: list[int] = []

    async def counting(call):
        first = worker._claims.last_pass is None
        rows = await real_run(call)
        if call.function == "jobs.claim_v1" and first:
            answered.append(len(rows))
        return rows

    worker.db.run = counting  # type: ignore[method-assign]
    return answered


@pytest.mark.parametrize("rotation", [0, 1, 2])
@pytest.mark.parametrize("work", [(10, 1, 1), (1, 1, 10), (10, 1, 10), (10, 10, 10)])
def test_a_pass_asks_again_a_queue_that_filled_its_share(database_url, work, rotation):
    """F68: room 5 over queues a, b, c is split 2, 2, 1 in the order of the rotation; a queue
    with less work leaves its rest to the queues after it, and a queue that filled its share is
    asked again while room is left, so the pass leaves no slot idle. Here a claim sent ahead is
    already in flight (it would otherwise be the one to ask again): the pass alone fills."""
    registry, started, release = _held_backlog(database_url, work)
    worker = Worker(registry, database_url, queues=["a", "b", "c"], max_in_flight=5, listen=False)
    worker._claims._idle = False  # a busy worker's pass, not the one statement of an idle fill
    worker._claims._rotation = rotation
    answered = _first_pass_claims(worker)

    async def scenario():
        release.append(asyncio.Event())
        in_flight: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        worker._claims._ahead = in_flight  # type: ignore[assignment]
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: len(started) == 5, what="five bodies started")
        in_flight.set_result(0)
        release[0].set()
        worker.stop()
        await runner

    asyncio.run(scenario())
    assert sum(answered) == 5, answered


@pytest.mark.parametrize("work", [(10, 1, 10), (10, 10, 10)])
def test_a_claim_sent_ahead_never_takes_room_the_pass_asked_for(database_url, work):
    """A full share sends the next claim ahead while the pass goes on to the next queue: both
    ask at once, and together they took 8 slots of a worker capped at 5 until a claim's slots
    were spoken for from the moment it was sent."""
    registry, started, release = _held_backlog(database_url, work)
    worker = Worker(registry, database_url, queues=["a", "b", "c"], max_in_flight=5, listen=False)
    worker._claims._idle = False
    answered = _first_pass_claims(worker)

    async def scenario():
        release.append(asyncio.Event())
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: worker._claims.last_pass is not None, what="the first pass")
        await asyncio.sleep(0.3)  # later passes would start any body over the cap now
        count = len(started)
        release[0].set()
        worker.stop()
        await runner
        return count

    assert asyncio.run(scenario()) == 5
    assert sum(answered) == 5, answered


def test_a_buried_job_is_reported_to_on_settled_once(database_url):
    registry = _registry(database_url)
    settled: list[durajobs.Settled] = []

    @declare(
        registry,
        "buried",
        input=TimedItem,
        retry=RetryPolicy.of(attempts=1),
        on_settled=settled.append,
    )
    async def buried(ctx):
        return None

    buried.enqueue({"key": "k"})
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.claim(["default"], "died"))
        connection.execute("update jobs.jobs set lease_expires_at = now() - interval '1 second'")
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=20),
        idle_ceiling=timedelta(milliseconds=40),
    )
    # several more claim passes after the burial: it is reported once
    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        asyncio.run(run_until(worker, lambda: bool(settled) and len(idle) > 5))
    assert [s.outcome for s in settled] == ["dead-lettered"]
    assert settled[0].input == {"key": "k", "seconds": 0.0}


def test_an_idle_pass_is_one_claim_over_every_queue(database_url):
    """F.62: idle cost does not grow with the number of queues: one statement a pass."""
    registry = _registry(database_url)
    worker = Worker(
        registry,
        database_url,
        queues=["a", "b", "c", "d"],
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=40),
    )
    # the statement a claim is sent as names its queues: noted once a claim
    real_statement = worker._claims._statement
    claims: list[list[str]] = []

    def counting(queues, dropping):
        claims.append(list(queues))
        return real_statement(queues, dropping)

    worker._claims._statement = counting  # type: ignore[method-assign]
    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        asyncio.run(run_until(worker, lambda: len(idle) >= 8))
    assert len(claims) == len(idle)  # one claim per idle pass, not one per queue
    assert all(sorted(queues) == ["a", "b", "c", "d"] for queues in claims)


def _idle_listener_on_mine(database_url):
    """A worker of queue 'mine' that polls once a minute and listens, and the list its claims
    are counted in (one element a claim)."""
    worker = Worker(
        _registry(database_url),
        database_url,
        queues=["mine"],
        listen=True,
        poll_floor=timedelta(minutes=1),
        idle_ceiling=timedelta(minutes=1),
        woken_idle_ceiling=timedelta(minutes=1),
    )
    real_run = worker.db.run
    claims: list[int] = []

    async def counting(call):
        if call.function == "jobs.claim_v1":
            claims.append(1)
        return await real_run(call)

    worker.db.run = counting  # type: ignore[method-assign]
    return worker, claims


async def _listening(worker, claims):
    """Start `worker`; answer its task once its listener is proven and its first claim ran."""
    runner = asyncio.ensure_future(worker.run())
    await eventually(
        lambda: worker._wake is not None and worker._wake.proven and claims,
        what="a proven listener and a first claim",
    )
    return runner


def test_a_wake_for_a_queue_the_worker_does_not_serve_is_ignored(database_url):
    worker, claims = _idle_listener_on_mine(database_url)

    async def scenario():
        runner = await _listening(worker, claims)
        before = len(claims)
        # a wake carries a queue's token (jobs.wake_tokens), never its name
        for payload in ("theirs", "mine", "jobs._wake_token('theirs')"):
            sent = payload if payload.startswith("jobs.") else f"'{payload}'"
            await asyncio.to_thread(
                fetch_all, database_url, f"select pg_notify('jobs_wake', {sent})"
            )
        await asyncio.sleep(0.5)
        ignored = len(claims) - before
        await asyncio.to_thread(
            fetch_all, database_url, "select pg_notify('jobs_wake', jobs._wake_token('mine'))"
        )
        for _ in range(100):
            if len(claims) > before:
                break
            await asyncio.sleep(0.02)
        woken = len(claims) - before
        worker.stop()
        await runner
        return ignored, woken

    ignored, woken = asyncio.run(scenario())
    assert ignored == 0
    assert woken == 1


def test_replayed_wakes_cost_at_most_one_claim_each(database_url):
    """Any role may NOTIFY: a listener that learnt a queue's token and replays it costs the idle
    worker at most one claim per wake (a wake only sets the claim loop's event, so wakes that
    arrive during a pass share the next one), and nothing more: no poll is shortened for
    good."""
    worker, claims = _idle_listener_on_mine(database_url)

    async def scenario():
        runner = await _listening(worker, claims)
        before = len(claims)

        def replay() -> None:
            # one transaction each: Postgres folds identical notifications of one transaction
            with psycopg.connect(database_url, autocommit=True) as sender:
                for _ in range(50):
                    sender.execute("select pg_notify('jobs_wake', jobs._wake_token('mine'))")

        await asyncio.to_thread(replay)
        await asyncio.sleep(1.0)
        woken = len(claims) - before
        worker.stop()
        await runner
        return woken

    assert 1 <= asyncio.run(scenario()) <= 50


def test_the_worker_installs_no_signal_handlers_unless_asked(database_url):
    """E.59: an embedding program keeps its own SIGTERM; the CLI asks for the drain."""
    import signal as signals

    registry = _registry(database_url)
    before = signals.getsignal(signals.SIGTERM)
    worker = Worker(registry, database_url, queues=["q"], listen=False)
    seen: list[object] = []

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: idle, what="the worker's first idle pass")
        seen.append(signals.getsignal(signals.SIGTERM))
        worker.stop()
        await runner

    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        asyncio.run(scenario())
    assert seen == [before]


def test_a_body_that_ignored_its_deadline_keeps_its_slot_until_it_returns(database_url):
    """Its thread is still busy: the slot stays taken, so the next job does not queue behind it
    and get failed as timed out without having run."""
    registry = _registry(database_url)
    events: list[tuple[str, float]] = []

    @declare(
        registry, "stubborn", input=TimedItem, timeout="200ms", retry=RetryPolicy.of(attempts=1)
    )
    def stubborn(ctx):
        time.sleep(1.0)  # ignores ctx.cancelled
        events.append(("stubborn-returned", time.monotonic()))

    @declare(registry, "next", input=TimedItem, timeout="300ms")
    def next_job(ctx):
        events.append(("next-started", time.monotonic()))

    stubborn.enqueue({"key": "a"})
    next_job.enqueue({"key": "b"})
    worker = Worker(registry, database_url, listen=False, max_in_flight=1)
    with recorded("durajobs.runtime.runner", "jobs.attempt.ended") as ended:
        asyncio.run(
            run_until(
                worker,
                lambda: any(e[0] == "next-started" for e in events) and len(ended) == 2,
            )
        )
    order = [name for name, _ in sorted(events, key=lambda e: e[1])]
    assert order == ["stubborn-returned", "next-started"]
    outcomes = {e["job"]: e["outcome"] for e in ended}
    # queued behind the busy thread, "next" would have timed out before it ever ran
    assert outcomes == {
        "stubborn": durajobs.Outcome.DEAD_LETTERED,
        "next": durajobs.Outcome.COMPLETED,
    }


def test_claimed_rows_start_before_a_slow_hook_of_a_buried_row(database_url):
    registry = _registry(database_url)
    started: list[float] = []

    async def slow_hook(settled):
        await asyncio.sleep(1.5)

    @declare(
        registry, "doomed", input=TimedItem, retry=RetryPolicy.of(attempts=1), on_settled=slow_hook
    )
    async def doomed(ctx):
        return None

    @declare(registry, "fresh", input=TimedItem)
    async def fresh(ctx):
        started.append(time.monotonic())

    doomed.enqueue({"key": "d"})
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.claim(["default"], "died"))
        connection.execute("update jobs.jobs set lease_expires_at = now() - interval '1 second'")
    fresh.enqueue({"key": "f"})
    worker = Worker(registry, database_url, listen=False)
    began = time.monotonic()
    asyncio.run(run_until(worker, lambda: bool(started)))
    assert started[0] - began < 1.4  # it did not wait for the buried row's 1.5 s hook


def test_a_drain_does_not_wait_past_its_deadline_for_a_buried_rows_hook(database_url, caplog):
    # the on_settled hooks of rows the claim buried ran to their end (3 tries each) after the
    # drain's deadline, holding the process past the platform's grace period
    registry = _registry(database_url)
    hooked: list[str] = []

    async def stuck_hook(settled):
        hooked.append("called")
        await asyncio.sleep(30)

    @declare(
        registry,
        "stuck-hook",
        input=TimedItem,
        retry=RetryPolicy.of(attempts=1),
        on_settled=stuck_hook,
    )
    async def stuck(ctx):
        return None

    stuck.enqueue({"key": "s"})
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.claim(["default"], "died"))
        connection.execute("update jobs.jobs set lease_expires_at = now() - interval '1 second'")
    worker = Worker(registry, database_url, listen=False, drain_deadline="1s")

    async def scenario() -> float:
        runner = asyncio.ensure_future(worker.run())
        async with asyncio.timeout(10):
            while not hooked:
                await asyncio.sleep(0.02)
        worker.drain()
        began = time.monotonic()
        async with asyncio.timeout(10):
            await runner
        return time.monotonic() - began

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        took = asyncio.run(scenario())
    assert took < 2.0, f"the drain took {took:.1f} s against a 1 s deadline"
    assert any(r.getMessage() == "jobs.worker.chores-abandoned" for r in caplog.records)
    assert fetch_all(database_url, "select state from jobs.jobs") == [("dead",)]


def test_a_slot_frees_when_the_body_ends_not_when_its_ack_lands(database_url):
    """The next claim overlaps the settle of the job before, and bodies never exceed the cap."""
    registry = _registry(database_url)
    running = {"now": 0, "most": 0}
    timeline: list[str] = []

    @declare(registry, "short", input=TimedItem)
    async def short(ctx):
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        timeline.append(f"start {ctx.input.key}")
        await asyncio.sleep(0.01)
        running["now"] -= 1

    for key in ("a", "b"):
        short.enqueue({"key": key})
    worker = Worker(registry, database_url, listen=False, concurrency=1)
    real_run = worker.settle_db.run

    async def slow_acks(call):
        if call.function == "jobs.ack_many_v1":
            timeline.append("ack sent")
            await asyncio.sleep(0.5)
            answer = await real_run(call)
            timeline.append("ack landed")
            return answer
        return await real_run(call)

    worker.settle_db.run = slow_acks  # type: ignore[method-assign]
    asyncio.run(run_until(worker, lambda: worker.stats().completed == 2))
    assert running["most"] == 1, "the cap on running bodies still holds"
    assert timeline.index("start b") < timeline.index("ack landed"), timeline


def _tick_registry(database_url):
    """A registry whose `tick` job notes each key it runs. Answers (registry, ran)."""
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "tick", input=TimedItem)
    async def tick(ctx):
        ran.append(ctx.input.key)

    return registry, ran


def _ticks_left_by_a_dead_worker(database_url, keys):
    """A registry whose `tick` job notes each key it runs, and rows of `keys` claimed by a worker
    that died: their leases already lapsed. Answers (registry, ran)."""
    registry, ran = _tick_registry(database_url)
    with durajobs.Client.connect(database_url) as client:
        for key in keys:
            client.enqueue("tick", {"key": key}, key)
        claimed = client.claim(["default"], "a-worker-that-died", batch_size=len(keys))
        assert len(claimed) == len(keys)
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update jobs.jobs set lease_expires_at = now() - interval '1 second'")
    return registry, ran


def _note_recoveries(worker):
    """Note (when, recover_lapsed) for each claim the worker sends."""
    real_run = worker.db.run
    claims: list[tuple[float, bool]] = []

    async def spying(call):
        if call.function == "jobs.claim_v1":
            claims.append((time.monotonic(), call.params.get("recover_lapsed", True)))
        return await real_run(call)

    worker.db.run = spying
    return claims


def test_a_worker_seeks_lapsed_leases_once_a_second_and_still_re_takes_them(database_url):
    """The scan for lapsed leases steps over every dead lease-index entry a vacuum has not yet
    removed, so claims ask for it at most once a second per queue (claim_v1 recover_lapsed)."""
    registry, ran = _ticks_left_by_a_dead_worker(database_url, ["lost"])
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=10),
    )
    claims = _note_recoveries(worker)
    began = time.monotonic()
    asyncio.run(run_until(worker, lambda: time.monotonic() - began >= 2.5))

    assert ran == ["lost"], "the first claim re-takes the lapsed lease"
    seeking = [at for at, recover in claims if recover]
    assert len(claims) > 40, "an idle worker polling every 10 ms claims often"
    assert 2 <= len(seeking) <= 4
    # the loop spaces its scans by the moment each claim was sized; the spy notes them a little
    # later, by a few milliseconds that differ from claim to claim
    assert all(later - earlier >= 0.98 for earlier, later in itertools.pairwise(seeking))


def test_a_recovering_claim_that_fills_its_batch_looks_again_at_once(database_url):
    """A full batch may have left lapsed rows behind: the next claim seeks them too, so a dead
    worker's rows come back at the claim rate, not one batch a second."""
    registry, ran = _ticks_left_by_a_dead_worker(database_url, ["lost-1", "lost-2", "lost-3"])
    worker = Worker(registry, database_url, concurrency=1, listen=False)
    claims = _note_recoveries(worker)
    asyncio.run(run_until(worker, lambda: len(ran) == 3))

    assert sorted(ran) == ["lost-1", "lost-2", "lost-3"]
    recovering = [recover for _at, recover in claims]
    # one row per claim (concurrency 1): each full batch asks again, until one comes back short
    assert recovering[:3] == [True, True, True]


def test_a_burn_down_of_new_jobs_seeks_lapsed_leases_once_a_second_not_every_batch(
    database_url, monkeypatch
):
    """Full batches of jobs on their first attempt came from the waiting rows, which a claim
    reads only once the lapsed ones no longer fill it: no lapsed row was left behind, and the
    claims after the first leave the scan to its interval."""
    monkeypatch.setattr(claimer, "MAX_CLAIM", 5)
    registry = _registry(database_url)
    ran: list[str] = []

    @declare(registry, "fresh", input=TimedItem)
    async def fresh(ctx):
        ran.append(ctx.input.key)

    for n in range(150):
        fresh.enqueue({"key": f"f{n}"})
    worker = Worker(registry, database_url, listen=False, concurrency=5)
    claims = _note_recoveries(worker)
    began = time.monotonic()
    asyncio.run(run_until(worker, lambda: len(ran) == 150))
    took = time.monotonic() - began
    assert len(claims) >= 30, "5 rows a claim"
    seeking = [at for at, recover in claims if recover]
    # the first claim, then at most one a second (the burn-down takes a moment)
    assert 1 <= len(seeking) <= 2 + int(took), (len(seeking), took)


def _note_claims(worker):
    """Note (recover_lapsed, rows answered) for each claim the worker sends."""
    real_run = worker.db.run
    claims: list[tuple[bool, int]] = []

    async def spying(call):
        answer = await real_run(call)
        if call.function == "jobs.claim_v1":
            claims.append((call.params.get("recover_lapsed", True), len(answer)))
        return answer

    worker.db.run = spying
    return claims


def _woken_worker(registry, database_url):
    # polls a minute apart: every claim in the scenario follows a wake
    return Worker(
        registry,
        database_url,
        listen=True,
        idle_ceiling=timedelta(minutes=1),
        woken_idle_ceiling=timedelta(minutes=1),
        poll_floor=timedelta(minutes=1),
    )


async def _until(condition, what):
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def _started_and_scan_due(worker, claims):
    """Run `worker` until its wake is proven and its first claim sent, then past the second it
    takes for the lapsed-lease scan to be due again; answers the running task."""
    runner = asyncio.ensure_future(worker.run())
    await _until(lambda: worker._wake is not None and worker._wake.proven, "a proven wake")
    await _until(lambda: claims, "the first claim")
    await asyncio.sleep(1.1)
    return runner


_ENQUEUE_TICK = (
    "select jobs.enqueue(name => 'tick', input => jsonb_build_object('key', %(key)s::text),"
    " idempotency_key => %(key)s)"
)
_CLAIM_ONE = (
    "select id from jobs.claim_v1(queues => '{default}', worker_id => %(worker)s, batch_size => 1)"
)


def test_a_pickup_leaves_the_lapsed_lease_scan_to_the_claim_after_it(database_url):
    """The scan for lapsed leases steps over every dead entry of the lease index (milliseconds
    on a busy table): the claim that picks up a woken job never carries it, the one sent right
    after it does, and a lapsed lease is still re-taken there."""
    registry, ran = _tick_registry(database_url)
    worker = _woken_worker(registry, database_url)
    claims = _note_claims(worker)

    async def scenario():
        runner = await _started_and_scan_due(worker, claims)
        before = len(claims)
        # one transaction, so one wake: a dead worker's row whose lease lapsed, and a new job
        with psycopg.connect(database_url) as connection:
            connection.execute(_ENQUEUE_TICK, {"key": "lapsed"})
            connection.execute(_CLAIM_ONE, {"worker": "a-worker-that-died"})
            connection.execute(
                "update jobs.jobs_live set lease_expires_at = now() - interval '1 second'"
                " where state = 'running'"
            )
            connection.execute(_ENQUEUE_TICK, {"key": "woken"})
        await _until(lambda: len(ran) == 2, "both rows run")
        worker.stop()
        await runner
        return claims[before:]

    after_wake = asyncio.run(scenario())
    assert ran == ["woken", "lapsed"]
    assert after_wake[:2] == [(False, 1), (True, 1)], after_wake


def test_a_pickup_that_finds_nothing_sends_the_scan_it_skipped(database_url):
    """A wake whose job another worker took leaves nothing to follow the pickup: the scan it
    skipped goes out at once in a claim of its own, not at the next poll a minute later."""
    registry, ran = _tick_registry(database_url)
    worker = _woken_worker(registry, database_url)
    claims = _note_claims(worker)

    async def scenario():
        runner = await _started_and_scan_due(worker, claims)
        before = len(claims)
        # taken in the enqueue's own transaction: the woken worker finds nothing
        with psycopg.connect(database_url) as connection:
            connection.execute(_ENQUEUE_TICK, {"key": "taken"})
            connection.execute(_CLAIM_ONE, {"worker": "another-worker"})
        await _until(lambda: len(claims) >= before + 2, "two claims after the wake")
        worker.stop()
        await runner
        return claims[before:]

    after_wake = asyncio.run(scenario())
    assert ran == []
    assert after_wake[:2] == [(False, 0), (True, 0)], after_wake


def test_a_pickup_that_fills_the_worker_never_spins_the_claim_loop(database_url):
    """A pickup that owed a scan and filled the worker: the passes after it find no room for
    the queue (its slot is held until the ack is answered) and claim nothing. Each must still
    yield to the loop, or the ack is never answered and the loop spins for ever (a first
    version of the pickup rule did, and a worker of the limits suite ran at 100 % CPU)."""
    registry, ran = _tick_registry(database_url)
    worker = Worker(
        registry,
        database_url,
        concurrency=1,
        listen=True,
        idle_ceiling=timedelta(minutes=1),
        woken_idle_ceiling=timedelta(minutes=1),
        poll_floor=timedelta(minutes=1),
    )
    claims = _note_claims(worker)

    class Spun(BaseException):
        """Not an Exception: the claim loop logs and survives those."""

    def spinning(_signal, _frame):
        raise Spun

    async def scenario():
        # the pickup skips the scan that is due and owes it
        runner = await _started_and_scan_due(worker, claims)
        with psycopg.connect(database_url) as connection:
            for key in ("a", "b", "c"):
                connection.execute(_ENQUEUE_TICK, {"key": key})
        await _until(lambda: len(ran) == 3, "three runs, one slot")
        worker.stop()
        await runner

    previous = signal.signal(signal.SIGALRM, spinning)
    signal.alarm(20)  # a spinning loop runs no coroutine: only a signal can end the test
    try:
        asyncio.run(scenario())
    except Spun:
        pytest.fail("the claim loop never yielded: the worker spun")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert sorted(ran) == ["a", "b", "c"]


def test_cancelling_the_worker_task_drains_like_sigterm(database_url):
    # `Worker.run()` under a TaskGroup, a timeout or Ctrl-C is cancelled, not drained: its held
    # attempts must still be handed back uncounted instead of left to lapse as counted attempts
    registry = _registry(database_url)
    seen: list[str] = []

    job = _body_that_notes_its_cancel(registry, "cancel-me", seen, attempts=1).enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)

    async def scenario():
        runner = await _run_until_started(worker, seen)
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner

    asyncio.run(scenario())
    assert worker.stats().outcomes == {durajobs.Outcome.INTERRUPTED: 1}
    assert fetch_all(
        database_url,
        "select state, attempt, lease_expires_at from jobs.jobs where id = %s",
        [job.id],
    ) == [("ready", 0, None)]
    assert fetch_all(database_url, "select count(*) from jobs.workers") == [(0,)]


def test_a_drain_waits_for_a_sync_step_still_running_in_its_thread(database_url):
    # an async body's sync step runs in a thread, which a cancel cannot stop: handing the run
    # back while it ran let another worker run the same step beside it
    registry = _registry(database_url)
    seen: list[str] = []

    def slow_step():
        seen.append("step-started")
        time.sleep(0.5)
        seen.append("step-finished")

    @declare(registry, "sync-step", input=TimedItem)
    async def sync_step(ctx):
        await ctx.step.run("slow", slow_step)

    job = sync_step.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    at_settle: list[list[str]] = []

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: "step-started" in seen, every=0.01, what="the step start")
        worker.drain()
        await runner
        at_settle.append(list(seen))

    asyncio.run(scenario())
    assert at_settle == [["step-started", "step-finished"]]
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
    ) == [("ready", 0)]


def test_the_drain_deadline_runs_from_the_drain_not_from_the_claim_in_flight(database_url):
    # a claim blocked when SIGTERM came (a locked or slow database) used to start the deadline
    # only once it returned, so the worker outlived the grace period the platform gave it
    registry = _registry(database_url)
    seen: list[str] = []
    release = threading.Event()

    @declare(registry, "stubborn", input=TimedItem)
    def stubborn(ctx):
        seen.append("started")
        release.wait(10)  # ignores ctx.cancelled

    stubborn.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False, drain_deadline=timedelta(seconds=2))

    def claim_is_blocked(connection) -> bool:
        return connection.execute(
            "select exists (select 1 from pg_locks where not granted"
            " and relation = 'jobs.queue_pauses'::regclass)"
        ).fetchone()[0]

    async def scenario() -> float:
        runner = asyncio.ensure_future(worker.run())
        with psycopg.connect(database_url, autocommit=True) as watcher:
            await eventually(lambda: "started" in seen, what="the body start")
            async with await psycopg.AsyncConnection.connect(database_url) as locker:
                # every claim reads the pauses: the worker's next one waits on this lock
                await locker.execute("lock table jobs.queue_pauses in access exclusive mode")
                await eventually(
                    lambda: claim_is_blocked(watcher), every=0.05, what="a claim on the lock"
                )
                drained_at = time.monotonic()
                worker.drain()
                await asyncio.sleep(3)
                await locker.rollback()
            await runner
            return time.monotonic() - drained_at

    try:
        took = asyncio.run(scenario())
    finally:
        release.set()
    assert worker.abandoned == 1
    # the deadline had passed when the claim came back (3 s): abandoned then, not 2 s later
    assert took < 4.5, f"run() returned {took:.1f} s after the drain"


def test_the_drain_budget_left_counts_down_from_the_drain(database_url):
    # `durajobs worker --with-scheduler` gives the scheduler's round what the worker left of
    # the budget: the whole deadline again let the process outlive it twice over
    worker = Worker(
        _registry(database_url),
        database_url,
        queues=["default"],
        listen=False,
        drain_deadline=timedelta(seconds=2),
    )
    assert worker.drain_time_left() is None

    async def scenario() -> tuple[float, float]:
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: idle, what="the worker's first idle pass")
        worker.drain()
        first = worker.drain_time_left()
        await runner
        await asyncio.sleep(0.5)
        return first, worker.drain_time_left()

    with recorded("durajobs.runtime.claimer", "jobs.worker.idle") as idle:
        first, later = asyncio.run(scenario())
    assert 1.5 < first <= 2.0
    assert later <= first - 0.5


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8, 13])
def test_a_second_cancel_still_forgets_the_registry_row(database_url, turns):
    # a second cancel during the worker's teardown skipped the rest of it: the registry row
    # stayed, renewed by a heartbeat that nobody stopped, and the pool stayed open
    worker = Worker(_registry(database_url), database_url, queues=["default"], visibility="1s")

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        async with asyncio.timeout(10):
            while not fetch_all(database_url, "select id from jobs.workers"):
                assert not runner.done(), runner
                await asyncio.sleep(0.02)
        runner.cancel()
        for _ in range(turns):
            await asyncio.sleep(0)
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await runner
        # a second cancel returns at once; the shielded teardown goes on: it has forgotten the
        # row once it has closed the pool, after which nothing can renew the row
        await eventually(lambda: worker.db.pool.closed, what="the worker's teardown")

    asyncio.run(scenario())
    assert fetch_all(database_url, "select count(*) from jobs.workers") == [(0,)]
    assert worker.db.pool.closed


def test_a_cancel_the_claim_dropped_still_stops_the_worker(database_url):
    # psycopg_pool's wait for a connection can drop a cancel: the worker claimed on as if never
    # cancelled, until a second cancel came (1 double-cancelled worker in about 10 right after
    # its start)
    worker = Worker(_registry(database_url), database_url, queues=["default"], listen=False)
    dropper = CancelDropper()
    worker._claims._pass = dropper.ahead_of(worker._claims._pass)  # type: ignore[method-assign]

    ended, cancelled = cancel_once_while_parked(worker.run, dropper)
    assert dropper.dropped
    assert ended, "the worker ran on after its one cancel was dropped"
    assert cancelled
    assert fetch_all(database_url, "select count(*) from jobs.workers") == [(0,)]


def test_drain_from_another_thread_interrupts_held_work(database_url):
    # a signal.signal handler or a web server's shutdown hook may call drain() off the loop's
    # thread: it raised there (no running loop) after setting its flags, so held attempts were
    # never cancelled and a second drain() did nothing
    registry = _registry(database_url)
    seen: list[str] = []

    job = _body_that_notes_its_cancel(registry, "threaded-drain", seen, attempts=1).enqueue(
        {"key": "k"}
    )
    worker = Worker(registry, database_url, listen=False)
    failures: list[BaseException] = []

    def drain_off_the_loop() -> None:
        try:
            worker.drain()
        except BaseException as failure:
            failures.append(failure)

    async def scenario():
        runner = await _run_until_started(worker, seen)
        caller = threading.Thread(target=drain_off_the_loop)
        caller.start()
        caller.join()
        async with asyncio.timeout(10):
            await runner

    asyncio.run(scenario())
    assert failures == []
    assert worker.stats().interrupted == 1
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
    ) == [("ready", 0)]


@pytest.mark.parametrize("ask", ["stop", "drain"])
def test_asking_to_stop_returns_at_once_and_run_waits_for_held_work(database_url, ask):
    """R42: stop() and drain() only ask; neither waits for the work in hand, so a shutdown
    hook that calls one goes on to the next at once, and it is run() that waits. Here the body
    holds on (after its cancel, for a drain) until the test lets it go: the call has returned,
    run() has not, and nothing has settled the job yet."""
    registry = _registry(database_url)
    seen: list[str] = []
    release: list[asyncio.Event] = []

    @declare(registry, "holds-on", input=TimedItem)
    async def holds_on(ctx):
        seen.append("started")
        try:
            await release[0].wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            await release[0].wait()  # the body's own cleanup, which the drain lets finish
            raise
        seen.append("finished")

    job = holds_on.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)

    async def scenario():
        release.append(asyncio.Event())
        runner = await _run_until_started(worker, seen)
        assert getattr(worker, ask)() is None
        await asyncio.sleep(0.3)  # time for run() to end, were it not waiting for the body
        assert not runner.done()
        assert fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id]) == [
            ("running",)
        ]
        release[0].set()
        async with asyncio.timeout(10):
            await runner

    asyncio.run(scenario())
    if ask == "stop":
        assert seen == ["started", "finished"]
        assert fetch_all(database_url, "select state from jobs.jobs where id = %s", [job.id]) == [
            ("done",)
        ]
    else:
        assert seen == ["started", "cancelled"]
        assert fetch_all(
            database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
        ) == [("ready", 0)]


@pytest.mark.parametrize(("part", "method"), [("presence", "_beat"), ("lease renewal", "_keep")])
def test_a_part_that_fails_stops_the_worker_and_gives_held_work_back(database_url, part, method):
    """The long-lived parts run under one TaskGroup: when one fails (a bug its own loop did not
    catch), the worker does not claim on without it. It drains as on SIGTERM (the held attempt
    is cancelled and handed back uncounted) while the other parts run on, the registry row
    goes, and run() raises the part's own error."""
    registry = _registry(database_url)
    seen: list[str] = []
    renewing: list[bool] = []  # whether the lease renewal still ran when the drain cancelled

    @declare(registry, "outlives-a-part", input=TimedItem, retry=RetryPolicy.of(attempts=1))
    async def body(ctx):
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            task = worker._leases._task
            renewing.append(task is not None and not task.done())
            raise

    job = body.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    owner = worker.registration if part == "presence" else worker._leases
    broken = RuntimeError(f"the {part} broke")
    go: list[asyncio.Event] = []

    async def failing() -> None:
        await go[0].wait()
        raise broken

    setattr(owner, method, failing)

    async def scenario():
        go.append(asyncio.Event())
        runner = await _run_until_started(worker, seen)
        go[0].set()
        with pytest.raises(RuntimeError) as raised:
            async with asyncio.timeout(10):
                await runner
        return raised.value

    with recorded("durajobs.runtime._asyncio", "jobs.worker.part-failed") as failed:
        assert asyncio.run(scenario()) is broken
    assert [(event["part"], event["error"]) for event in failed] == [(part, repr(broken))]
    assert seen == ["started", "cancelled"]
    # the other parts run on through the drain: a held attempt keeps its lease renewed
    assert renewing == [part != "lease renewal"]
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]
    ) == [("ready", 0)]
    assert fetch_all(database_url, "select count(*) from jobs.workers") == [(0,)]
    assert worker.db.pool.closed


def test_an_ack_lands_while_claims_and_step_writes_hold_every_pooled_connection(database_url):
    """Renewals and acks have connections of their own: a finished attempt's ack never waits
    behind a pool that claims and step writes have exhausted."""
    registry = _registry(database_url)
    go = asyncio.Event()
    started = asyncio.Event()

    @declare(registry, "finishing", input=TimedItem)
    async def finishing(ctx):
        started.set()
        await go.wait()

    job = finishing.enqueue({"key": "k"})
    worker = Worker(registry, database_url, listen=False)
    landed: dict[str, float] = {}

    # a statement each holder runs through the worker's own pool, waiting on a lock the test
    # holds: how claims and step writes that the database is slow to answer hold connections
    hold = calls.Call(
        function="pg_advisory_xact_lock_shared",
        sql="select pg_advisory_xact_lock_shared(%(key)s)",
        params={"key": HOLD_LOCK},
        decode=lambda rows: None,
    )

    def waiting_on_the_lock() -> int:
        rows = fetch_all(
            database_url,
            """select count(*) from pg_locks
                where locktype = 'advisory' and objid = %s and not granted""",
            [HOLD_LOCK],
        )
        return int(rows[0][0])

    async def scenario() -> None:
        runner = asyncio.ensure_future(worker.run())
        holders: list[asyncio.Future[None]] = []
        with psycopg.connect(database_url, autocommit=True) as blocker:
            blocker.execute("select pg_advisory_lock(%s)", [HOLD_LOCK])
            try:
                await asyncio.wait_for(started.wait(), 10)
                size = worker.db.pool.max_size
                holders = [asyncio.ensure_future(worker.db.run(hold)) for _ in range(size)]
                await eventually(
                    lambda: waiting_on_the_lock() == size, what="every pooled connection held"
                )
                go.set()
                began = time.monotonic()

                def done() -> bool:
                    rows = fetch_all(
                        database_url, "select state from jobs.jobs where id = %s", [job.id]
                    )
                    return rows == [("done",)]

                await eventually(done, timeout=5, what="the ack landing")
                landed["after"] = time.monotonic() - began
            finally:
                blocker.execute("select pg_advisory_unlock(%s)", [HOLD_LOCK])
                await asyncio.gather(*holders, return_exceptions=True)
                worker.stop()
                await runner

    asyncio.run(scenario())
    assert landed["after"] < 2.0


def test_five_wakes_during_a_pass_ask_for_one_more_pass(database_url):
    """F63: wakes that arrive while a claim pass runs are not lost and not added up: after the
    pass, the loop makes exactly one more, then waits."""
    worker = Worker(
        _registry(database_url),
        database_url,
        queues=["mine"],
        listen=False,
        poll_floor=timedelta(minutes=1),
        idle_ceiling=timedelta(minutes=1),
    )
    real_run = worker.db.run
    claims: list[int] = []
    gate = asyncio.Event()

    async def gated(call):
        if call.function == "jobs.claim_v1":
            claims.append(1)
            if len(claims) == 2:
                await gate.wait()  # the second pass holds here while the wakes arrive
        return await real_run(call)

    worker.db.run = gated  # type: ignore[method-assign]

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        await eventually(lambda: len(claims) == 1, what="the first pass")
        await asyncio.sleep(0.2)  # idle now, waiting a minute for its next poll
        worker.kick()
        await eventually(lambda: len(claims) == 2, what="the woken pass")
        for _ in range(5):
            worker.kick()
        gate.set()
        await asyncio.sleep(1.0)
        passes = len(claims)
        worker.stop()
        await runner
        return passes

    assert asyncio.run(scenario()) == 3


def test_the_lease_renewer_stops_though_its_renewal_dropped_the_cancel(database_url):
    """The renewal waits on the settle pool, whose wait for a connection can drop a cancel: one
    cancel then left the renewals going, and the worker's teardown waited on them for good."""
    from durajobs.runtime.cancel import CancelSignal
    from durajobs.runtime.lease import LeaseRenewer

    with durajobs.Client.connect(database_url) as client:
        client.enqueue("renewed", {}, "k")
        [claimed] = client.claim(["default"], "w-renew")

    async def scenario() -> tuple[bool, bool]:
        async with AsyncDatabase(database_url) as db:
            dropper = CancelDropper()
            renewer = LeaseRenewer(
                dropper.ahead_of(db.run), "w-renew", visibility=timedelta(milliseconds=300)
            )
            renewer.hold(claimed, CancelSignal(), time.monotonic() - 0.2)
            renewer.batch_held()
            async with asyncio.timeout(10):
                await dropper.entered.wait()
            closing = asyncio.ensure_future(renewer.close())
            done, _ = await asyncio.wait({closing}, timeout=3)
            if not done:
                closing.cancel()
            return bool(done), dropper.dropped

    stopped, dropped = asyncio.run(scenario())
    assert dropped
    assert stopped, "the renewer ran on after its one cancel was dropped"
