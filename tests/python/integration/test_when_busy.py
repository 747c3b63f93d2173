"""A worker under a keyed limit with when_busy='fail': the run whose key another run holds is
refused by the claim, never runs, and is announced as refused once."""

from __future__ import annotations

import asyncio
import logging

import durajobs
from durajobs import Concurrency
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.rows import fetch_all
from support.running import run_until


def test_a_run_whose_key_another_run_holds_is_refused_not_run(database_url, caplog):
    registry = durajobs.Registry(database_url=database_url)
    settled: list[durajobs.Settled] = []
    ran: list[str] = []

    @declare(
        registry,
        "exclusive",
        concurrency=Concurrency(key=lambda item: "the-account", limit=1, when_busy="fail"),
        on_settled=settled.append,
    )
    async def exclusive(ctx) -> None:
        ran.append(ctx.input.key)
        await asyncio.sleep(0.2)

    with durajobs.Client.connect(database_url) as client:
        registry.declare(client, declared_by="test")
        first = exclusive.enqueue({"key": "first"}, using=client)
        second = exclusive.enqueue({"key": "second"}, using=client)

    def both_ended() -> bool:
        rows = fetch_all(
            database_url, "select state from jobs.jobs where state in ('done', 'failed')"
        )
        return len(rows) == 2 and len(settled) == 2

    worker = Worker(registry, database_url, listen=False)
    with caplog.at_level(logging.WARNING, logger="durajobs.runtime.claimer"):
        asyncio.run(run_until(worker, both_ended))

    states = dict(fetch_all(database_url, "select id, state from jobs.jobs"))
    assert states == {first.id: "done", second.id: "failed"}
    assert ran == ["first"], "the refused run's body never ran"
    outcomes = {s.job_id: (s.outcome, s.code) for s in settled}
    assert outcomes[second.id] == ("refused", "X_JOB_KEY_BUSY")
    assert outcomes[first.id] == ("completed", None)
    assert worker.stats().outcomes.get("refused") == 1
    assert [r.msg for r in caplog.records].count("jobs.claim.refused") == 1
