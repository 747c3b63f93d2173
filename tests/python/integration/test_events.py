"""step.wait_for_event: park until a matching event is published, on the database's clock."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import psycopg
import pytest
from pydantic import BaseModel

import durajobs
from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs.runtime.attempt import run_attempt
from durajobs.runtime.cancel import CancelSignal
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.leases import HeldLease
from support.outbox import eventually
from support.waiting import clock_at


class Order(BaseModel):
    order_id: str


def _order_job(registry, name, **options):
    """Declare an Order job keyed by its order id, untenanted."""
    return declare(registry, name, input=Order, idempotency_key=lambda o: o.order_id, **options)


def _row(database_url, query, params=()):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query, params).fetchone()


async def _attempt(database_url, registry, *, later_by=None):
    """Claim and run one attempt; `later_by` (a number of seconds) runs it on the database's
    clock moved that far past now, instead of waiting for it."""
    if later_by is not None:
        (instant,) = _row(database_url, "select now() + make_interval(secs => %s)", [later_by])
        database_url = clock_at(database_url, instant)
    async with AsyncDatabase(database_url) as db:
        rows = await db.run(calls.claim(["default"], "w"))
        assert rows, "nothing was due"
        return await run_attempt(rows[0], registry, db=db, signal=CancelSignal(), lease=HeldLease())


def _make_due(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update jobs.jobs set run_at = now() where state = 'suspended'")


@pytest.mark.parametrize("kind", ["async", "def"])
def test_a_published_event_resumes_the_waiting_run_with_its_payload(database_url, kind):
    registry = durajobs.Registry(database_url=database_url)
    received: list[object] = []

    if kind == "async":

        @_order_job(registry, "ship")
        async def ship(ctx):
            paid = await ctx.step.wait_for_event(
                "wait-paid", "order.paid", match=ctx.input.order_id
            )
            received.append(paid)

    else:

        @_order_job(registry, "ship")
        def ship(ctx):
            paid = ctx.step.wait_for_event("wait-paid", "order.paid", match=ctx.input.order_id)
            received.append(paid)

    job = ship.enqueue({"order_id": "o-1"})
    first = asyncio.run(_attempt(database_url, registry))
    assert first.outcome is durajobs.Outcome.SUSPENDED
    assert _row(database_url, "select state, attempt from jobs.jobs where id = %s", [job.id]) == (
        "suspended",
        0,
    )
    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.paid", {"amount": 42}, correlation_key="o-2")  # not ours
        client.publish_event("order.paid", {"amount": 10}, correlation_key="o-1")
    # the publish made the parked run due at once
    assert _row(database_url, "select run_at <= now() from jobs.jobs where id = %s", [job.id]) == (
        True,
    )
    second = asyncio.run(_attempt(database_url, registry))
    assert second.outcome is durajobs.Outcome.COMPLETED
    assert received == [{"amount": 10}]


def test_an_event_published_before_the_wait_began_is_not_taken(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @_order_job(registry, "late")
    async def late(ctx):
        return await ctx.step.wait_for_event("wait", "order.paid", match=ctx.input.order_id)

    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.paid", {"old": True}, correlation_key="o-1")
    late.enqueue({"order_id": "o-1"})
    execution = asyncio.run(_attempt(database_url, registry))
    assert execution.outcome is durajobs.Outcome.SUSPENDED


def test_a_required_wait_past_its_timeout_fails_with_x_job_timeout(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @_order_job(registry, "impatient", retry=durajobs.RetryPolicy.of(attempts=1))
    async def impatient(ctx):
        await ctx.step.wait_for_event("wait", "order.paid", timeout="300ms")

    job = impatient.enqueue({"order_id": "o-1"})
    first = asyncio.run(_attempt(database_url, registry))
    assert first.outcome is durajobs.Outcome.SUSPENDED
    # parked no longer than the timeout, though event_poll is 30 s
    assert _row(
        database_url,
        "select run_at - updated_at <= interval '300 milliseconds' from jobs.jobs where id = %s",
        [job.id],
    ) == (True,)
    _make_due(database_url)
    second = asyncio.run(_attempt(database_url, registry, later_by=0.35))  # past the timeout
    assert second.code == "X_JOB_TIMEOUT"
    assert "'wait'" in (second.error or "")


def test_a_timed_out_wait_stays_timed_out_when_its_event_comes_late(database_url):
    """A handler that catches the timeout takes another branch. Left waiting, the step was
    completed by an event published later, and the replay took the branch the run had not:
    both branches' side effects. It is stored as failed and answers the timeout again."""
    registry = durajobs.Registry(database_url=database_url)
    branches: list[str] = []
    escalated: list[str] = []

    @_order_job(registry, "approval")
    async def approval(ctx):
        try:
            await ctx.step.wait_for_event("wait", "order.approved", timeout="300ms")
        except durajobs.errors.JobTimeout:
            branches.append("escalate")
            await ctx.step.run("escalate", lambda: escalated.append("paged") or "paged")
            await ctx.step.sleep("cool-off", "150ms")
            return
        branches.append("approved")

    approval.enqueue({"order_id": "o-9"})
    first = asyncio.run(_attempt(database_url, registry))
    assert first.outcome is durajobs.Outcome.SUSPENDED
    _make_due(database_url)
    second = asyncio.run(_attempt(database_url, registry, later_by=0.35))  # past the timeout
    assert second.outcome is durajobs.Outcome.SUSPENDED  # in the cool-off
    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.approved", {"late": True})
    time.sleep(0.2)  # past the cool-off (a sleep is timed on the worker's clock)
    _make_due(database_url)
    third = asyncio.run(_attempt(database_url, registry, later_by=0.35))
    assert third.outcome is durajobs.Outcome.COMPLETED
    assert branches == ["escalate", "escalate"], "the replay took the branch the run took"
    assert escalated == ["paged"]


def test_a_retry_after_an_uncaught_timeout_takes_an_event_that_came_since(database_url):
    """Uncaught, the timeout fails the attempt; the retry looks once more, from when the wait
    began, and takes an event published in the meantime (the step stored as failed between)."""
    registry = durajobs.Registry(database_url=database_url)
    got: list[object] = []

    @_order_job(
        registry, "patient", retry=durajobs.RetryPolicy.of(attempts=3, delay="10ms", jitter=False)
    )
    async def patient(ctx):
        got.append(await ctx.step.wait_for_event("wait", "order.paid", timeout="300ms"))

    job = patient.enqueue({"order_id": "o-10"})
    assert asyncio.run(_attempt(database_url, registry)).outcome is durajobs.Outcome.SUSPENDED
    _make_due(database_url)
    timed_out = asyncio.run(_attempt(database_url, registry, later_by=0.35))
    assert (timed_out.outcome, timed_out.code) == (durajobs.Outcome.RETRIED, "X_JOB_TIMEOUT")
    assert _row(database_url, "select status from jobs.steps where run_id = %s", [job.run_id]) == (
        "failed",
    )
    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.paid", {"paid": True})
    time.sleep(0.05)  # the retry's delay
    _make_due(database_url)
    retried = asyncio.run(_attempt(database_url, registry, later_by=0.35))
    assert retried.outcome is durajobs.Outcome.COMPLETED
    assert got == [{"paid": True}]


def test_an_optional_wait_past_its_timeout_answers_none(database_url):
    registry = durajobs.Registry(database_url=database_url)
    answers: list[object] = []

    @_order_job(registry, "optional")
    async def optional(ctx):
        answers.append(
            await ctx.step.wait_for_event("wait", "nudge", timeout="200ms", required=False)
        )

    optional.enqueue({"order_id": "o-1"})
    asyncio.run(_attempt(database_url, registry))
    _make_due(database_url)
    execution = asyncio.run(_attempt(database_url, registry, later_by=0.25))  # past the timeout
    assert execution.outcome is durajobs.Outcome.COMPLETED
    assert answers == [None]


def test_event_poll_sets_how_long_a_wait_parks(database_url):
    """R26: event_poll reaches the runner: the suspended row is due one poll later."""
    registry = durajobs.Registry(database_url=database_url)

    @_order_job(registry, "polled", event_poll="1s")
    async def polled(ctx):
        await ctx.step.wait_for_event("wait", "never")

    job = polled.enqueue({"order_id": "o-1"})
    asyncio.run(_attempt(database_url, registry))
    parked_for = _row(
        database_url, "select run_at - updated_at from jobs.jobs where id = %s", [job.id]
    )[0]
    assert timedelta(seconds=0.9) <= parked_for <= timedelta(seconds=1.1)


def test_a_worker_runs_a_waiting_job_to_the_end_when_the_event_comes(database_url):
    registry = durajobs.Registry(database_url=database_url)
    done: list[object] = []

    @_order_job(registry, "flow")
    async def flow(ctx):
        paid = await ctx.step.wait_for_event("wait-paid", "order.paid", match=ctx.input.order_id)
        done.append(paid)

    flow.enqueue({"order_id": "o-5"})
    worker = Worker(registry, database_url, listen=True)

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        await eventually(
            lambda: _row(database_url, "select state from jobs.jobs")[0] == "suspended",
            what="the run parked on its wait",
        )
        with durajobs.Client.connect(database_url) as client:
            client.publish_event("order.paid", {"ok": True}, correlation_key="o-5")
        deadline = time.monotonic() + 10  # the poll floor finds the woken row, not event_poll
        while not done:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        worker.stop()
        await runner

    asyncio.run(scenario())
    assert done == [{"ok": True}]


def test_a_publish_wakes_the_waiting_runs_queue(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @_order_job(registry, "waits", queue="orders")
    async def waits(ctx):
        await ctx.step.wait_for_event("wait", "order.paid", match=ctx.input.order_id)

    waits.enqueue({"order_id": "o-1"})

    async def park():
        async with AsyncDatabase(database_url) as db:
            (row,) = await db.run(calls.claim(["orders"], "w"))
            await run_attempt(row, registry, db=db, signal=CancelSignal(), lease=HeldLease())

    asyncio.run(park())
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("listen jobs_wake")
        with durajobs.Client.connect(database_url) as client:
            client.publish_event("order.shipped", correlation_key="o-1")  # nobody waits on it
            client.publish_event("order.paid", correlation_key="o-1")
        heard = [notice.payload for notice in listener.notifies(timeout=0.5)]
        (token,) = listener.execute("select jobs._wake_token('orders')").fetchone()
    assert heard == [token]


def test_a_worker_clock_running_ahead_neither_misses_an_event_nor_times_out_early(
    database_url, monkeypatch
):
    """C.35: a wait is stamped and judged on the database's clock, never the worker's."""
    import durajobs.runtime.steps as steps_module

    real_datetime = steps_module.datetime

    class AheadClock(real_datetime):  # type: ignore[misc, valid-type]
        @classmethod
        def now(cls, tz=None):
            return real_datetime.now(tz) + timedelta(seconds=30)

    monkeypatch.setattr(steps_module, "datetime", AheadClock)
    registry = durajobs.Registry(database_url=database_url)
    answers: list[object] = []

    @_order_job(registry, "skewed")
    async def skewed(ctx):
        answers.append(
            await ctx.step.wait_for_event(
                "wait", "order.paid", match=ctx.input.order_id, timeout="10s"
            )
        )

    job = skewed.enqueue({"order_id": "o-1"})
    first = asyncio.run(_attempt(database_url, registry))
    assert first.outcome is durajobs.Outcome.SUSPENDED  # not timed out by a clock 30 s ahead
    # parked for the database's 10 s at most, not shortened or lengthened by the skew
    parked = _row(
        database_url, "select run_at - updated_at from jobs.jobs where id = %s", [job.id]
    )[0]
    assert timedelta(seconds=9) <= parked <= timedelta(seconds=10.5)
    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.paid", {"late": False}, correlation_key="o-1")
    second = asyncio.run(_attempt(database_url, registry))
    assert second.outcome is durajobs.Outcome.COMPLETED
    assert answers == [{"late": False}]


class TenantOrder(BaseModel):
    order_id: str
    org_id: str


def test_a_run_takes_only_its_own_tenants_events(database_url):
    """An event published for tenant globex is not acme's run's, even with the same name and
    correlation key: the step runner asks for its run's tenant's events (014_tenants)."""
    registry = durajobs.Registry(database_url=database_url)
    received: list[object] = []

    @declare(
        registry,
        "ship.tenant",
        input=TenantOrder,
        idempotency_key=lambda o: o.order_id,
        tenant=lambda o: o.org_id,
    )
    async def ship(ctx):
        received.append(
            await ctx.step.wait_for_event("wait-paid", "order.paid", match=ctx.input.order_id)
        )

    job = ship.enqueue({"order_id": "o-1", "org_id": "acme"})
    first = asyncio.run(_attempt(database_url, registry))
    assert first.outcome is durajobs.Outcome.SUSPENDED
    with durajobs.Client.connect(database_url) as client:
        client.publish_event(
            "order.paid", {"by": "globex"}, correlation_key="o-1", tenant_id="globex"
        )
    # another tenant's event neither woke the run nor is taken by it
    assert _row(database_url, "select run_at > now() from jobs.jobs where id = %s", [job.id]) == (
        True,
    )
    _make_due(database_url)
    again = asyncio.run(_attempt(database_url, registry))
    assert again.outcome is durajobs.Outcome.SUSPENDED
    with durajobs.Client.connect(database_url) as client:
        client.publish_event("order.paid", {"by": "acme"}, correlation_key="o-1", tenant_id="acme")
    last = asyncio.run(_attempt(database_url, registry))
    assert last.outcome is durajobs.Outcome.COMPLETED
    assert received == [{"by": "acme"}]


def test_a_publish_logs_jobs_event_published_without_its_payload(database_url, caplog):
    import logging

    with (
        caplog.at_level(logging.INFO, logger="durajobs"),
        durajobs.Client.connect(database_url) as client,
    ):
        # a marker no number of the record (its timestamps) can hold by chance, as "4111" did
        event_id = client.publish_event(
            "card.saved", {"pan": "pan-4111-secret"}, correlation_key="u-7"
        )
    published = [r for r in caplog.records if r.getMessage() == "jobs.event.published"]
    assert len(published) == 1
    record = published[0]
    assert (record.event, record.id, record.correlation_key) == ("card.saved", str(event_id), "u-7")
    assert "pan-4111-secret" not in repr(record.__dict__)
