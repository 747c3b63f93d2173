"""Backfills (items 168-179, 181, R74-R79): a keyset-paged sweep of a real table by a worker,
one durable step a page, each pass a row of the ledger jobs.backfills."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._values.records import BackfillPass
from durajobs.declare import backfill as backfill_module
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import DeclarationInvalid
from durajobs.runtime.worker import Worker
from durajobs.services.backfills import inspect_backfills
from support.rows import fetch_all
from support.running import run_until

FAST_RETRY = RetryPolicy.of(attempts=3, delay=timedelta(milliseconds=10), jitter=False)


def _fill(database_url: str, count: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "create table if not exists backfill_items (id int primary key, done int default 0)"
        )
        connection.execute("truncate backfill_items")
        connection.execute("insert into backfill_items (id) select generate_series(1, %s)", [count])


class Source:
    """Reads backfill_items a keyset page at a time, noting each page's `after`."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.asked: list[Any] = []

    def __call__(self, page: durajobs.Page) -> list[tuple[int]]:
        self.asked.append(page.after)
        with psycopg.connect(self.database_url) as connection:
            rows = connection.execute(
                "select id from backfill_items where id > %s order by id limit %s",
                [-1 if page.after is None else page.after, page.limit],
            ).fetchall()
        return [(int(row[0]),) for row in rows]


class Handle:
    """Marks each row of a page done; `fail_on` makes the page holding that id raise once,
    after the rows were written (between the last row and the checkpoint)."""

    def __init__(self, database_url: str, fail_on: int | None = None) -> None:
        self.database_url = database_url
        self.pages: list[list[int]] = []
        self.fail_on = fail_on

    def __call__(self, rows: list[tuple[int]], signal: object) -> None:
        ids = [row[0] for row in rows]
        self.pages.append(ids)
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            connection.execute(
                "update backfill_items set done = done + 1 where id = any(%s)", [ids]
            )
        if self.fail_on in ids:
            self.fail_on = None
            raise RuntimeError("the handler lost its connection after writing the page")


def _declare(
    database_url: str, *, source: Source | None = None, handle: Handle | None = None, **more: Any
) -> tuple[durajobs.Registry, durajobs.Job[durajobs.BackfillInput]]:
    registry = durajobs.Registry(database_url=database_url)
    declaration: dict[str, Any] = {
        "name": "items.fill",
        "source": source or Source(database_url),
        "key": lambda row: row[0],
        "handle": handle or Handle(database_url),
        "batch": 3,
        "rate": 1000,
        "retry": FAST_RETRY,
    }
    declaration.update(more)
    job = registry.backfill(**declaration)
    return registry, job


def _run(
    database_url: str, registry: durajobs.Registry, force: bool = False
) -> tuple[str, str | None, durajobs.EnqueueResult, int]:
    """Enqueue a pass, run a worker until its job ends; answer (state, last_error, the
    enqueue's answer, the attempt it ended on). The body's answer is not stored (results are
    not kept yet): what a pass did is read from the table, its steps and the ledger."""
    job = registry.get("items.fill")
    assert job is not None
    enqueued = job.enqueue({"force": force})
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )

    def ended() -> bool:
        rows = fetch_all(database_url, "select state from jobs.jobs where id = %s", [enqueued.id])
        return rows[0][0] in ("done", "dead", "failed")

    asyncio.run(run_until(worker, ended))
    ((state, error, attempt),) = fetch_all(
        database_url,
        "select state, last_error, attempt from jobs.jobs where id = %s",
        [enqueued.id],
    )
    return state, error, enqueued, attempt


def _ledger(database_url: str) -> list[tuple[Any, ...]]:
    return fetch_all(
        database_url,
        "select run_id, status, batches, rows_processed, started_at, completed_at, forced"
        " from jobs.backfills order by id",
    )


def _done_counts(database_url: str) -> list[int]:
    return [
        row[0] for row in fetch_all(database_url, "select done from backfill_items order by id")
    ]


def test_a_pass_sweeps_every_row_once_and_completes_its_ledger_row(database_url):
    """Items 168-169: 8 rows in pages of 3 are 3 steps; every row handled once; the ledger row
    counts 3 batches and 8 rows and says completed."""
    _fill(database_url, 8)
    source = Source(database_url)
    registry, _job = _declare(database_url, source=source)
    state, error, enqueued, _attempt = _run(database_url, registry)
    assert (state, error) == ("done", None)
    assert _done_counts(database_url) == [1] * 8
    assert source.asked == [None, 3, 6]  # keyset: each page after the last key, never an offset
    ((run_id, status, batches, rows, _started, completed, forced),) = _ledger(database_url)
    assert (run_id, status, batches, rows, forced) == (enqueued.run_id, "completed", 3, 8, False)
    assert completed is not None


def test_a_page_step_keeps_a_cursor_and_a_count_never_rows(database_url):
    """R77: the stored step outputs hold only the cursor, the page's count and whether it was
    the last: their size does not grow with the page."""
    _fill(database_url, 7)
    registry, _job = _declare(database_url)
    _state, _error, enqueued, _attempt = _run(database_url, registry)
    steps = fetch_all(
        database_url,
        "select name, output from jobs.steps where run_id = %s order by name",
        [enqueued.run_id],
    )
    assert [name for name, _output in steps] == ["batch:0", "batch:1", "batch:2"]
    for _name, output in steps:
        assert set(output) == {"cursor", "rows", "last"}
        assert len(json.dumps(output)) < 60
    assert [output["cursor"] for _name, output in steps] == [3, 6, 7]


def test_the_name_is_the_idempotency_key(database_url):
    """Item 168: enqueued twice while live, the second dedupes onto the first."""
    _fill(database_url, 1)
    _registry, job = _declare(database_url)
    first = job.enqueue({})
    second = job.enqueue({})
    assert not first.deduped
    assert second.deduped
    assert second.id == first.id


def test_a_failed_page_is_replayed_and_the_retry_adopts_its_ledger_row(database_url):
    """Items 169-170, R79: the handler fails after writing page 2 (rows 4-6) and before its
    checkpoint; the retry starts at page 2 (pages 0 and 1 are not read again), handles page 2
    once more (at least once), keeps the ledger row with its start and counts nothing twice."""
    _fill(database_url, 8)
    source, handle = Source(database_url), Handle(database_url, fail_on=5)
    registry, _job = _declare(database_url, source=source, handle=handle)
    state, _error, enqueued, attempt = _run(database_url, registry)
    assert state == "done"
    assert attempt == 2
    assert source.asked == [None, 3, 3, 6]
    assert handle.pages == [[1, 2, 3], [4, 5, 6], [4, 5, 6], [7, 8]]
    assert _done_counts(database_url) == [1, 1, 1, 2, 2, 2, 1, 1]
    ((run_id, status, batches, rows, started, completed, _forced),) = _ledger(database_url)
    assert (run_id, status, batches, rows) == (enqueued.run_id, "completed", 3, 8)
    assert completed is not None
    assert started < completed


def test_a_retry_adopts_the_failed_row_keeping_its_start(database_url):
    """Item 173, R79, in the ledger alone: a second start of one run answers 'adopted', keeps
    started_at and clears the failure; its counts are totals, so a page written again counts
    once."""
    run_id, job_id = "7d1c5a34-5a8e-4d7e-9f55-0c1d2e3f4a5b", "9f2e1b77-1c2d-4e5f-8a9b-0c1d2e3f4a5c"
    with durajobs.Client.connect(database_url) as client:
        start = calls.backfill_start
        first = client.run(start("b", run_id=run_id, job_id=job_id, checksum="c",
                                 environment="e", force=False, tenant_id=None))  # fmt: skip
        client.run(calls.backfill_progress(run_id, batches=2, rows_processed=6))
        client.run(calls.backfill_finish(run_id, status="failed", error="boom"))
        (before,) = client.run(calls.backfills("b"))
        again = client.run(start("b", run_id=run_id, job_id=job_id, checksum="c",
                                 environment="e", force=False, tenant_id=None))  # fmt: skip
        client.run(calls.backfill_progress(run_id, batches=2, rows_processed=6))  # a replay
        client.run(calls.backfill_progress(run_id, batches=3, rows_processed=8))
        (after,) = client.run(calls.backfills("b"))
    assert (first.outcome, again.outcome) == ("started", "adopted")
    assert (again.batches, again.rows_processed) == (2, 6)
    assert before.status == "failed"
    assert before.error == "boom"
    assert after.status == "running"
    assert after.error is None
    assert after.failed_at is None
    assert after.started_at == before.started_at
    assert (after.batches, after.rows_processed) == (3, 8)


def test_a_completed_backfill_is_skipped_and_force_runs_a_new_pass(database_url, caplog):
    """Item 173, R76: enqueued after it completed, the job is not deduped (the completed job is
    not live) but the pass is a no-op naming the pass that completed; force writes a new row."""
    _fill(database_url, 4)
    registry, _job = _declare(database_url)
    _state, _error, first, _attempt = _run(database_url, registry)
    with caplog.at_level(logging.INFO, logger="durajobs.declare.backfill"):
        state, _error, second, _attempt = _run(database_url, registry)
    assert not second.deduped
    assert second.id != first.id
    assert state == "done"
    (skipped,) = [r for r in caplog.records if r.message == "jobs.backfill.skipped"]
    assert skipped.previous_run_id == str(first.run_id)  # type: ignore[attr-defined]
    assert skipped.checksum_moved is False  # type: ignore[attr-defined]
    assert _done_counts(database_url) == [1] * 4
    assert len(_ledger(database_url)) == 1
    state, _error, third, _attempt = _run(database_url, registry, force=True)
    assert state == "done"
    assert _done_counts(database_url) == [2] * 4
    ledger = _ledger(database_url)
    assert [(row[0], row[1], row[6]) for row in ledger] == [
        (first.run_id, "completed", False),
        (third.run_id, "completed", True),
    ]


def test_a_moved_checksum_warns_and_does_not_run_again(database_url, caplog):
    """Item 173: a completed pass made by another declaration (its handle changed) is reported,
    never re-run by itself."""
    _fill(database_url, 2)
    registry, _job = _declare(database_url)
    _run(database_url, registry)

    def other_handle(rows: list[tuple[int]], signal: object) -> None:
        raise AssertionError("a completed backfill ran again")

    changed, _job = _declare(database_url, handle=other_handle)
    with caplog.at_level(logging.INFO, logger="durajobs.declare.backfill"):
        state, *_ = _run(database_url, changed)
    assert state == "done"
    (skipped,) = [r for r in caplog.records if r.message == "jobs.backfill.skipped"]
    assert skipped.checksum_moved is True  # type: ignore[attr-defined]
    assert any(r.message == "jobs.backfill.checksum-moved" for r in caplog.records)
    assert len(_ledger(database_url)) == 1


def _checksum(**declaration: Any) -> str:
    registry = durajobs.Registry()
    registry.backfill(name="a", **declaration)
    (declared,) = registry.backfills()
    return declared.checksum


def test_rate_and_batch_are_not_part_of_the_checksum():
    """Item 172: the checksum follows what the pass does, not how fast it goes, even for
    lambdas written on the line that sets the rate (their source text would hold it)."""
    # each declaration on one line, as a backfill often is
    slow = _checksum(source=lambda p: [], key=lambda r: r[0], handle=lambda rs, s: None, rate=1)
    fast = _checksum(source=lambda p: [], key=lambda r: r[0], handle=lambda rs, s: None, rate=9)
    small = _checksum(source=lambda p: [], key=lambda r: r[0], handle=lambda rs, s: None, batch=7)
    assert slow == fast == small
    other_key = _checksum(source=lambda p: [], key=lambda r: r[1], handle=lambda rs, s: None)
    other_handle = _checksum(source=lambda p: [], key=lambda r: r[0], handle=_test_rate_helper)
    required = _checksum(
        source=lambda p: [], key=lambda r: r[0], handle=lambda rs, s: None, requires="rev_2"
    )
    assert len({slow, other_key, other_handle, required}) == 4


def _test_rate_helper(rows: list[Any], signal: object) -> None:
    return None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("batch", 0),
        ("batch", 1.5),
        ("batch", math.nan),
        ("batch", True),
        ("rate", 0),
        ("rate", -1),
        ("rate", math.inf),
        ("rate", math.nan),
        ("rate", None),
        ("source", "not a function"),
        ("handle", None),
        ("count", 3),
        ("requires", ""),
        ("environments", "production"),
        ("tenant", ""),
    ],
)
def test_a_bad_declaration_is_refused_at_declaration(field, value):
    """Item 171: batch 0, 1.5 or NaN and a rate that is not positive and finite (there is
    no unthrottled mode) are refused before any handler runs."""
    declaration: dict[str, Any] = {
        "name": "bad",
        "source": lambda page: [],
        "key": lambda row: row,
        "handle": lambda rows, signal: None,
    }
    declaration[field] = value
    with pytest.raises(DeclarationInvalid) as refused:
        durajobs.Registry().backfill(**declaration)
    assert refused.value.detail["field"] == field


def test_a_fractional_rate_is_a_pause_of_its_inverse(database_url, monkeypatch):
    """Item 171: rate 0.5 is one page every 2 s; the pause is taken before every page but the
    first, inside its step."""
    pauses: list[float] = []

    async def counted(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(backfill_module, "_pause", counted)
    _fill(database_url, 7)
    registry, _job = _declare(database_url, rate=0.5)
    state, *_ = _run(database_url, registry)
    assert state == "done"
    assert pauses == [2.0, 2.0]


def test_a_resumed_pass_pays_no_pause_for_the_pages_it_replays(database_url, monkeypatch):
    """R78: the handler fails on page 4; the retry replays pages 0-3 from their checkpoints and
    pauses only before the pages it runs (page 4 again, then 5)."""
    pauses: list[float] = []

    async def counted(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(backfill_module, "_pause", counted)
    _fill(database_url, 16)
    registry, _job = _declare(database_url, rate=1, handle=Handle(database_url, fail_on=13))
    state, _error, _enqueued, attempt = _run(database_url, registry)
    assert (state, attempt) == ("done", 2)
    # first attempt: pages 1-4 pause (4); second: page 4 and page 5 (2), none for 0-3
    assert pauses == [1.0] * 6


def test_the_rate_pause_unwinds_on_cancel(database_url):
    """Item 171: a pass cancelled during its pause stops there: the pause is inside the step,
    whose signal the cancel sets."""
    _fill(database_url, 9)
    registry, job = _declare(database_url, rate=0.05)  # 20 s between pages
    enqueued = job.enqueue({})
    worker = Worker(
        registry,
        database_url,
        listen=False,
        visibility=timedelta(seconds=1),  # the lease renewal that hears the cancel, often
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )

    asked: list[bool] = []

    def cancelled_after_first_page() -> bool:
        pages = fetch_all(
            database_url, "select count(*) from jobs.steps where run_id = %s", [enqueued.run_id]
        )[0][0]
        if pages >= 1 and not asked:
            asked.append(True)
            with durajobs.Client.connect(database_url) as client:
                client.run(calls.cancel(enqueued.id, reason="stop the sweep"))
        state = fetch_all(database_url, "select state from jobs.jobs where id = %s", [enqueued.id])
        return state[0][0] == "cancelled" and worker.stats().in_flight == 0

    asyncio.run(asyncio.wait_for(run_until(worker, cancelled_after_first_page), timeout=15))
    assert _done_counts(database_url) == [1, 1, 1, 0, 0, 0, 0, 0, 0]


def test_a_pass_in_an_environment_it_does_not_name_dies_with_its_code(database_url, monkeypatch):
    """Item 178: environments=['production'] enqueued in staging dead-letters on attempt 1 with
    X_BACKFILL_ENVIRONMENT, having read nothing."""
    monkeypatch.setenv("DURAJOBS_ENVIRONMENT", "staging")
    _fill(database_url, 3)
    source = Source(database_url)
    registry, _job = _declare(database_url, source=source, environments=["production"])
    state, error, _enqueued, attempt = _run(database_url, registry)
    assert (state, attempt) == ("dead", 1)
    assert error is not None
    assert "X_BACKFILL_ENVIRONMENT" in error
    assert source.asked == []
    assert _ledger(database_url) == []


@pytest.mark.parametrize("answer", [math.nan, -1, 1.5, "3", None, True])
def test_a_count_that_is_not_a_count_is_an_invariant(database_url, answer):
    """R75: NaN > 0 and -1 > 0 are false, so either would pass a stalled sweep for done."""
    _fill(database_url, 2)
    registry, _job = _declare(database_url, count=lambda: answer, retry=RetryPolicy.of(attempts=1))
    state, error, *_ = _run(database_url, registry)
    assert state == "dead"
    assert error is not None
    assert "X_INVARIANT" in error


def test_a_count_left_after_the_last_page_stalls_the_pass_on_its_attempt(database_url):
    """R75, item 179: the source ran out with 3 rows still to do by count(): X_BACKFILL_STALLED,
    terminal (dead on attempt 1 of 3), and the ledger row says failed."""
    _fill(database_url, 2)
    registry, _job = _declare(database_url, count=lambda: 3)
    state, error, _enqueued, attempt = _run(database_url, registry)
    assert (state, attempt) == ("dead", 1)
    assert error is not None
    assert "X_BACKFILL_STALLED" in error
    ((_run_id, status, *_rest),) = _ledger(database_url)
    assert status == "failed"


def test_a_count_of_zero_completes(database_url):
    _fill(database_url, 2)
    registry, _job = _declare(database_url, count=lambda: 0)
    assert _run(database_url, registry)[0] == "done"


def test_a_tenant_backfill_acts_for_its_tenant(database_url):
    """Item 174: tenant='acme' makes every pass's row act for acme, and the ledger says so."""
    _fill(database_url, 2)
    registry, _job = _declare(database_url, tenant="acme")
    _state, _error, enqueued, _attempt = _run(database_url, registry)
    assert fetch_all(
        database_url, "select tenant_id from jobs.jobs where id = %s", [enqueued.id]
    ) == [("acme",)]
    assert fetch_all(database_url, "select tenant_id from jobs.backfills") == [("acme",)]


def test_is_backfill_knows_its_own_and_only_them():
    """Item 175: a backfill's job is one; a plain job, a name it does not declare, or another
    registry's look-alike is not."""
    registry, job = _declare("")
    _other, look_alike = _declare("")

    @registry.job(name="plain", input=durajobs.BackfillInput, idempotency_key=lambda i: "k",
                  tenant="none")  # fmt: skip
    def plain(ctx: Any) -> None:
        return None

    assert registry.is_backfill(job)
    assert registry.is_backfill("items.fill")
    assert not registry.is_backfill(plain)
    assert not registry.is_backfill("plain")
    assert not registry.is_backfill("nothing")
    assert not registry.is_backfill(look_alike)
    assert [b.name for b in registry.backfills()] == ["items.fill"]


def test_the_projection_names_each_state():
    """Items 175, 181, R74: pending (never enqueued: not invisible), running, completed, failed,
    excluded, and the orphaned names of the ledger; a pure function of the declarations and
    the passes (it reads no clock and no table)."""
    registry = durajobs.Registry()
    common: dict[str, Any] = {"source": lambda p: [], "key": lambda r: r}
    for name in ("a.pending", "b.running", "c.completed", "d.failed", "e.retrying", "g.redone"):
        registry.backfill(name=name, handle=lambda rows, signal: None, **common)
    registry.backfill(
        name="f.excluded", handle=lambda rows, signal: None, environments=["prod"], **common
    )
    checksums = {b.name: b.checksum for b in registry.backfills()}
    passes = [
        _pass("b.running", "running", "running", checksums),
        _pass("c.completed", "completed", "done", checksums),
        _pass("d.failed", "failed", "dead", checksums),
        _pass("e.retrying", "failed", "delayed", checksums),
        _pass("gone", "completed", None, checksums),
        _pass("g.redone", "completed", "done", {"g.redone": "moved"}, minute=1),
        _pass("g.redone", "running", None, checksums, minute=2),  # its job was purged
    ]
    report = inspect_backfills(registry.backfills(), passes, "dev")
    states = {row.name: row.state for row in report.rows}
    assert states == {
        "a.pending": "pending",
        "b.running": "running",
        "c.completed": "completed",
        "d.failed": "failed",
        "e.retrying": "running",
        "f.excluded": "excluded",
        "g.redone": "failed",
    }
    assert report.pending == ("a.pending", "d.failed", "g.redone")
    assert report.orphaned == ("gone",)
    redone = report.get("g.redone")
    assert redone is not None
    assert redone.passes == 2
    assert redone.checksum_moved
    assert report.get("c.completed").checksum_moved is False  # type: ignore[union-attr]
    assert inspect_backfills(registry.backfills(), [], "dev").orphaned == ()
    assert inspect_backfills(registry.backfills(), [], "prod").get("f.excluded").state == (  # type: ignore[union-attr]
        "pending"
    )


def _pass(
    name: str, status: str, job_state: str | None, checksums: dict[str, str], minute: int = 0
) -> BackfillPass:
    at = datetime(2026, 12, 1, 12, minute, tzinfo=UTC)
    return BackfillPass(
        id=minute,
        name=name,
        run_id=uuid4(),
        job_id=uuid4(),
        tenant_id=None,
        status=status,
        job_state=job_state,
        checksum=checksums.get(name, "other"),
        environment="dev",
        forced=False,
        batches=1,
        rows_processed=3,
        started_at=at,
        updated_at=at,
        completed_at=at if status == "completed" else None,
        failed_at=at if status == "failed" else None,
        error=None,
    )


def test_a_pass_refuses_to_run_before_its_required_migration(database_url):
    """Item 177, the rail under the gate: a pass enqueued without the command (job.enqueue,
    SQL) fails X_BACKFILL_MIGRATION_PENDING, retryable, having read nothing, until the
    application's version table holds the revision; then it runs."""
    _fill(database_url, 2)
    source = Source(database_url)
    registry, _job = _declare(
        database_url, source=source, requires="app_0002", retry=RetryPolicy.of(attempts=1)
    )
    state, error, *_ = _run(database_url, registry)
    assert state == "dead"
    assert error is not None
    assert "X_BACKFILL_MIGRATION_PENDING" in error
    assert source.asked == []
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table alembic_version (version_num varchar(32) primary key)")
        connection.execute("insert into alembic_version values ('app_0002')")
    registry, _job = _declare(database_url, source=source, requires="app_0002")
    assert _run(database_url, registry)[0] == "done"
    assert source.asked == [None]
