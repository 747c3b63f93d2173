"""Limits with a real Worker: a keyed run that waits its turn, a resumed run refused or not
(R65), an input the key cannot be read from failing only its own attempt (R66), a lost
place cancelling the run (R64), a limit the catalogue does not hold refusing the worker (R30),
the limits set in SQL holding a worker to them, and the gauges a scrape shows."""

from __future__ import annotations

import asyncio
import itertools
import logging
import urllib.request
from datetime import timedelta

import psycopg
import pytest

import durajobs
from durajobs import Concurrency
from durajobs.errors import JobConcurrencyUnenforceable, JobSlotLost
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import Invoice, TimedItem
from support.rows import fetch_all
from support.running import run_until


def _states(database_url: str) -> dict[str, tuple[str, int]]:
    rows = fetch_all(database_url, "select idempotency_key, state, attempt from jobs.jobs")
    return {key: (state, attempt) for key, state, attempt in rows}


def test_runs_sharing_a_busy_key_wait_their_turn_and_burn_no_attempt(database_url):
    registry = durajobs.Registry(database_url=database_url)
    spans: list[tuple[str, float, float]] = []

    @declare(
        registry,
        "serial",
        input=TimedItem,
        concurrency=Concurrency(key=lambda item: "one-account", limit=1),
    )
    async def serial(ctx) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(ctx.input.seconds)
        spans.append((ctx.input.key, started, loop.time()))

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        for key in ("a", "b", "c"):
            serial.enqueue({"key": key, "seconds": 0.2}, using=client)

    worker = Worker(registry, database_url, listen=False, concurrency=8)
    asyncio.run(run_until(worker, lambda: len(spans) == 3))

    assert _states(database_url) == {"a": ("done", 1), "b": ("done", 1), "c": ("done", 1)}
    ordered = sorted(spans, key=lambda span: span[1])
    assert [span[0] for span in ordered] == ["a", "b", "c"], "they ran in enqueue order"
    for earlier, later in itertools.pairwise(ordered):
        assert later[1] >= earlier[2], "a run started only after the one before ended"


def test_a_resumed_run_is_refused_only_when_another_run_took_its_key(database_url):
    """R65: a run meeting no other holder on its resume goes on; a run resuming while
    another run holds its key is refused (the decision is taken at every claim)."""
    registry = durajobs.Registry(database_url=database_url)
    settled: list[durajobs.Settled] = []

    @declare(
        registry,
        "exclusive",
        input=TimedItem,
        concurrency=Concurrency(key=lambda item: "the-key", limit=1, when_busy="fail"),
        on_settled=settled.append,
    )
    async def exclusive(ctx) -> None:
        if ctx.input.key.startswith("sleeper"):
            await ctx.step.sleep("pause", 0.4)
        else:
            await asyncio.sleep(ctx.input.seconds)

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        exclusive.enqueue({"key": "sleeper-alone"}, using=client)

    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, lambda: len(settled) == 1))
    assert _states(database_url)["sleeper-alone"][0] == "done", "its own past claim is no holder"

    settled.clear()
    with durajobs.Client.connect(database_url) as client:
        exclusive.enqueue({"key": "sleeper-overtaken"}, using=client)

    def suspended() -> bool:
        return _states(database_url).get("sleeper-overtaken", ("",))[0] == "suspended"

    async def overtake() -> None:
        runner = asyncio.ensure_future(worker_two.run())
        try:
            while not suspended():
                await asyncio.sleep(0.02)
            with durajobs.Client.connect(database_url) as client:
                # takes the key while the sleeper is parked, and holds it past its wake
                exclusive.enqueue({"key": "holder", "seconds": 1.5}, using=client)
            while len(settled) < 2:
                await asyncio.sleep(0.02)
        finally:
            worker_two.stop()
            await asyncio.wait_for(runner, 30)

    worker_two = Worker(registry, database_url, listen=False)
    asyncio.run(asyncio.wait_for(overtake(), 30))
    states = _states(database_url)
    assert states["holder"][0] == "done"
    assert states["sleeper-overtaken"][0] == "failed"
    outcomes = {s.outcome for s in settled}
    assert outcomes == {"completed", "refused"}
    [code] = fetch_all(
        database_url,
        "select last_error_code from jobs.jobs where idempotency_key = 'sleeper-overtaken'",
    )
    assert code == ("X_JOB_KEY_BUSY",)


def test_an_input_the_key_cannot_be_read_from_fails_its_attempt_not_the_round(database_url):
    """R66: the key is stored at enqueue, so the claim never calls key(); a stored input that no
    longer parses fails that run's attempt through the retry path (which knows a stored input
    cannot get better, so it dead-letters at once), and the round's other runs go on."""
    registry = durajobs.Registry(database_url=database_url)
    ran: list[str] = []

    @declare(
        registry,
        "keyed",
        input=TimedItem,
        concurrency=Concurrency(key=lambda item: item.key, limit=1),
        retry=durajobs.RetryPolicy.of(attempts=2, delay="10ms"),
    )
    async def keyed(ctx) -> None:
        ran.append(ctx.input.key)

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        for key in ("k1", "k2"):
            keyed.enqueue({"key": key}, using=client)
        # written from SQL with an input the model refuses (seconds is no number)
        client.enqueue("keyed", {"key": "k3", "seconds": "soon"}, "bad", concurrency_key="k3")

    def settled() -> bool:
        states = _states(database_url)
        return len(ran) == 2 and states.get("bad", ("",))[0] == "dead"

    worker = Worker(registry, database_url, listen=False)
    asyncio.run(run_until(worker, settled))
    assert sorted(ran) == ["k1", "k2"]
    assert _states(database_url)["bad"] == ("dead", 1)
    [(code,)] = fetch_all(
        database_url, "select last_error_code from jobs.jobs where idempotency_key = 'bad'"
    )
    assert code == "X_JOB_INPUT_INVALID"


def test_a_limited_run_whose_place_is_taken_back_is_cancelled(database_url, caplog):
    """R64: in durajobs a running row is its own place under its limits, so a renewal fenced
    out is a lost place: the body is cancelled with X_JOB_SLOT_LOST."""
    registry = durajobs.Registry(database_url=database_url)
    seen: list[BaseException] = []
    started = asyncio.Event()

    @declare(registry, "capped", input=TimedItem, concurrency=1)
    async def capped(ctx) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(ctx.signal.reason)
            raise

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        capped.enqueue({"key": "only"}, using=client)

    async def scenario() -> None:
        worker = Worker(registry, database_url, listen=False, visibility=1.5)
        runner = asyncio.ensure_future(worker.run())
        try:
            await asyncio.wait_for(started.wait(), 10)
            with psycopg.connect(database_url, autocommit=True) as connection:
                # another claim took the row: the next renewal meets a stale token
                connection.execute("update jobs.jobs set claims = claims + 1")
            deadline = asyncio.get_running_loop().time() + 10
            while not seen:
                assert asyncio.get_running_loop().time() < deadline, "never cancelled"
                await asyncio.sleep(0.02)
        finally:
            worker.stop()
            await asyncio.wait_for(runner, 30)

    with caplog.at_level(logging.ERROR, logger="durajobs.runtime.lease"):
        asyncio.run(scenario())
    assert isinstance(seen[0], JobSlotLost)
    assert seen[0].code == "X_JOB_SLOT_LOST"
    assert "jobs.worker.slot-lost" in [record.msg for record in caplog.records]


def test_a_worker_refuses_to_start_when_the_catalogue_holds_another_limit(database_url):
    """R30: the claim enforces the stored declaration, so a worker whose code declares a limit
    the catalogue does not hold refuses to start rather than run it unlimited."""
    stored = durajobs.Registry(database_url=database_url)
    declare(stored, "mailer", concurrency=5)(lambda ctx: None)
    with durajobs.Client.connect(database_url) as client:
        stored.declare(client, declared_by="deploy-1")

    deployed = durajobs.Registry(database_url=database_url)
    declare(deployed, "mailer", concurrency=1)(lambda ctx: None)
    worker = Worker(deployed, database_url, listen=False)
    with pytest.raises(JobConcurrencyUnenforceable) as refused:
        asyncio.run(asyncio.wait_for(worker.run(), 30))
    assert refused.value.detail["jobs"]["mailer"]["concurrency"] == {"stored": 5, "declared": 1}

    # a worker whose code declares no limit is held to the stored one: nothing to refuse
    plain = durajobs.Registry(database_url=database_url)
    declare(plain, "mailer")(lambda ctx: None)
    ran = Worker(plain, database_url, listen=False)
    asyncio.run(run_until(ran, lambda: ran.stats().in_flight == 0))


def test_a_worker_is_held_to_the_limits_set_in_sql(database_url):
    registry = durajobs.Registry(database_url=database_url)
    running: dict[str, int] = {}
    peaks: dict[str, int] = {}

    @declare(
        registry,
        "invoice",
        input=Invoice,
        idempotency_key=lambda i: str(i.invoice_id),
        tenant=lambda invoice: invoice.org_id,
    )
    async def invoice(ctx) -> None:
        org = ctx.input.org_id
        running[org] = running.get(org, 0) + 1
        peaks[org] = max(peaks.get(org, 0), running[org])
        await asyncio.sleep(0.05)
        running[org] -= 1

    with durajobs.Client.connect(database_url) as client:
        client.set_limit(every_tenant=True, concurrency=2)
        client.set_limit(tenant_id="big", concurrency=4)
        for n in range(60):
            invoice.enqueue(
                {"invoice_id": n, "org_id": ("small", "big", "other")[n % 3]}, using=client
            )

    def all_done() -> bool:
        return (
            fetch_all(database_url, "select count(*) from jobs.jobs where state = 'done'")[0][0]
            == 60
        )

    worker = Worker(registry, database_url, listen=False, concurrency=20)
    asyncio.run(run_until(worker, all_done, timeout=60))
    assert peaks["small"] == 2, "each tenant at most 2"
    assert peaks["other"] == 2, "each tenant at most 2"
    assert peaks["big"] == 4, "big's own rule overrides the every-tenant one"


def test_a_scrape_shows_what_each_limit_holds_back(database_url):
    registry = durajobs.Registry(database_url=database_url)
    release = asyncio.Event()

    @declare(registry, "slow", input=TimedItem, concurrency=1)
    async def slow(ctx) -> None:
        await release.wait()

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        for key in ("a", "b", "c"):
            slow.enqueue({"key": key}, using=client)
        client.set_limit(queue="reports", rate=10, per=timedelta(minutes=1))
    worker = Worker(registry, database_url, listen=False, metrics_port=0, metrics_host="127.0.0.1")
    scraped: dict[str, str] = {}

    def scraped_while_held() -> bool:
        if worker.stats().in_flight != 1:
            return False
        url = f"http://127.0.0.1:{worker.metrics.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            scraped["text"] = answer.read().decode()
        release.set()
        return True

    asyncio.run(run_until(worker, scraped_while_held))
    text = scraped["text"]
    labels = 'job="slow",key="",queue="",scope="job",tenant=""'
    assert f"limit_held_back_jobs{{{labels}}} 2.0" in text
    assert f"limit_running_jobs{{{labels}}} 1.0" in text
    assert 'limit_held_back_jobs{job="",key="",queue="reports",scope="queue",tenant=""} 0.0' in text


def test_a_slot_whose_body_never_started_is_freed_at_once(database_url):
    """R103: a claim takes a concurrency slot with the row; an attempt that fails between the
    claim and its body (the stored input does not parse) settles the row, which frees the
    slot there and then: the next run of the job starts at once, not after a lease lapses."""
    registry = durajobs.Registry(database_url=database_url)
    ran: list[str] = []

    @declare(registry, "single", input=TimedItem, concurrency=1)
    async def single(ctx) -> None:
        ran.append(ctx.input.key)

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        # written by hand, as another deploy or a psql user could: not a TimedItem
        client.enqueue("single", {"seconds": "never"}, "broken")
        single.enqueue({"key": "good", "seconds": 0}, using=client)

    worker = Worker(registry, database_url, listen=False, visibility=timedelta(seconds=30))
    asyncio.run(asyncio.wait_for(run_until(worker, lambda: ran == ["good"]), timeout=10))
    assert _states(database_url) == {"broken": ("dead", 1), "good": ("done", 1)}
