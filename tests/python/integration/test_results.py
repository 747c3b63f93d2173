"""A job's result: stored by the ack that completes it, read from SQL, awaited from Python.

`handle.result()` (async) and `handle.wait()` (sync) are woken by the `jobs_settled` notice and
poll as the guarantee; a timeout leaves the job alone; a failed, dead or cancelled job raises its
stored error; a wait on a job whose transaction is still open is refused (issue 21).
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from pydantic import BaseModel

import durajobs
import durajobs._db.awaiting as awaiting
from durajobs._values.records import JobOutcome
from durajobs._values.states import JobState
from durajobs.services.relay import OutboxRelay
from support.rows import fetch_all


class Numbers(BaseModel):
    a: int
    b: int = 0


class Sum(BaseModel):
    total: int


def _registry(database_url: str) -> tuple[durajobs.Registry, dict[str, Any]]:
    registry = durajobs.Registry(database_url)
    jobs: dict[str, Any] = {}

    @registry.job(
        name="add", input=Numbers, idempotency_key=lambda i: f"add:{i.a}:{i.b}", tenant="none"
    )
    async def add(ctx: durajobs.JobContext[Numbers]) -> dict[str, int]:
        return {"sum": ctx.input.a + ctx.input.b}

    @registry.job(
        name="add-model",
        input=Numbers,
        idempotency_key=lambda i: f"m:{i.a}:{i.b}",
        tenant="none",
        output=Sum,
    )
    def add_model(ctx: durajobs.SyncJobContext[Numbers]) -> Sum:
        return Sum(total=ctx.input.a + ctx.input.b)

    @registry.job(
        name="add-dict",
        input=Numbers,
        idempotency_key=lambda i: f"d:{i.a}",
        tenant="none",
        output=Sum,
    )
    async def add_dict(ctx: durajobs.JobContext[Numbers]) -> dict[str, Any]:
        # a dict is validated into the model: a wrong one fails the run
        return {"total": ctx.input.a} if ctx.input.b == 0 else {"total": "many"}

    @registry.job(
        name="nothing", input=Numbers, idempotency_key=lambda i: f"n:{i.a}", tenant="none"
    )
    async def nothing(ctx: durajobs.JobContext[Numbers]) -> None:
        return None

    @registry.job(
        name="boom",
        input=Numbers,
        idempotency_key=lambda i: f"boom:{i.a}",
        tenant="none",
        retry=durajobs.RetryPolicy.of(attempts=1),
    )
    async def boom(ctx: durajobs.JobContext[Numbers]) -> None:
        raise ValueError(f"boom {ctx.input.a}")

    @registry.job(
        name="drop",
        input=Numbers,
        idempotency_key=lambda i: f"drop:{i.a}",
        tenant="none",
        retry=durajobs.RetryPolicy.of(attempts=1, dead_letter=False),
    )
    async def drop(ctx: durajobs.JobContext[Numbers]) -> None:
        raise ValueError("dropped")

    @registry.job(
        name="slow-timeout",
        input=Numbers,
        idempotency_key=lambda i: f"t:{i.a}",
        tenant="none",
        timeout="100ms",
        retry=durajobs.RetryPolicy.of(attempts=1),
    )
    async def slow(ctx: durajobs.JobContext[Numbers]) -> None:
        await asyncio.sleep(5)

    @registry.job(
        name="not-json",
        input=Numbers,
        idempotency_key=lambda i: f"nj:{i.a}",
        tenant="none",
        retry=durajobs.RetryPolicy.of(attempts=3, delay="10ms"),
    )
    async def not_json(ctx: durajobs.JobContext[Numbers]) -> object:
        jobs["not-json-runs"] = jobs.get("not-json-runs", 0) + 1
        return object()

    jobs.update(
        add=add,
        add_model=add_model,
        add_dict=add_dict,
        nothing=nothing,
        boom=boom,
        drop=drop,
        slow=slow,
        not_json=not_json,
    )
    return registry, jobs


async def _with_worker(registry: durajobs.Registry, database_url: str, body: Any) -> Any:
    """Run `body()` (a coroutine function) while a worker serves the registry."""
    worker = durajobs.Worker(registry, database_url, concurrency=4)
    runner = asyncio.ensure_future(worker.run())
    try:
        return await body()
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 30)


def test_a_result_round_trips_async_and_is_stored_on_the_row(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 2, "b": 3})

    value = asyncio.run(_with_worker(registry, database_url, lambda: handle.result(timeout=20)))

    assert value == {"sum": 5}
    assert fetch_all(
        database_url, "select state, result from jobs.jobs where id = %s", [handle.id]
    ) == [("done", {"sum": 5})]


def test_a_result_round_trips_sync_from_a_thread_without_a_loop(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["add_model"].enqueue({"a": 20, "b": 22})

    async def body() -> Any:
        return await asyncio.to_thread(handle.wait, 20)

    value = asyncio.run(_with_worker(registry, database_url, body))

    # the declared output model comes back as the model
    assert value == Sum(total=42)
    assert fetch_all(database_url, "select result from jobs.jobs where id = %s", [handle.id]) == [
        ({"total": 42},)
    ]


def test_a_body_returning_none_stores_no_result_and_answers_none(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["nothing"].enqueue({"a": 1})

    value = asyncio.run(_with_worker(registry, database_url, lambda: handle.result(timeout=20)))

    assert value is None
    assert fetch_all(
        database_url, "select state, result from jobs.jobs where id = %s", [handle.id]
    ) == [("done", None)]


def test_the_settle_notice_wakes_a_wait_long_before_its_poll(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 1, "b": 1})

    async def body() -> tuple[Any, float]:
        began = time.monotonic()
        value = await handle.result(timeout=60, poll=timedelta(seconds=60))
        return value, time.monotonic() - began

    value, waited = asyncio.run(_with_worker(registry, database_url, body))

    assert value == {"sum": 2}
    # a poll would have read it after 60 s: only the notice explains an answer this soon
    assert waited < 30


def test_with_no_notice_the_poll_still_finds_the_result(database_url, monkeypatch):
    registry, jobs = _registry(database_url)
    # the wait listens where nothing is ever sent: every notice is lost
    monkeypatch.setattr(awaiting, "SETTLED_CHANNEL", "jobs_settled_lost_in_this_test")
    handle = jobs["add"].enqueue({"a": 4, "b": 4})

    value = asyncio.run(
        _with_worker(
            registry, database_url, lambda: handle.result(timeout=20, poll=timedelta(seconds=0.2))
        )
    )

    assert value == {"sum": 8}


def test_a_wait_whose_connection_drops_connects_again_and_finds_the_result(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 5, "b": 5})

    async def body() -> Any:
        # no worker yet: the wait is listening when its backend is killed
        waiting = asyncio.ensure_future(handle.result(timeout=30, poll=timedelta(seconds=0.2)))
        deadline = time.monotonic() + 10
        while not fetch_all(
            database_url, "select 1 from pg_stat_activity where application_name = 'durajobs-await'"
        ):
            assert time.monotonic() < deadline, "the wait never connected"
            await asyncio.sleep(0.05)
        fetch_all(
            database_url,
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where application_name = 'durajobs-await'",
        )
        return await _with_worker(registry, database_url, lambda: waiting)

    assert asyncio.run(body()) == {"sum": 10}


def test_a_timeout_raises_its_code_and_leaves_the_job_alone(database_url):
    _, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 1, "b": 2})

    with pytest.raises(durajobs.JobResultTimeout) as raised:
        handle.wait(timeout=0.3, poll=0.1)

    assert raised.value.code == "X_JOB_RESULT_TIMEOUT"
    assert raised.value.detail["state"] == "ready"
    with pytest.raises(durajobs.JobResultTimeout):
        asyncio.run(handle.result(timeout=0.3, poll=0.1))
    # no worker ran: the job is exactly as it was enqueued
    assert fetch_all(
        database_url, "select state, attempt from jobs.jobs where id = %s", [handle.id]
    ) == [("ready", 0)]


def test_a_dead_job_raises_job_failed_with_its_stored_error(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["boom"].enqueue({"a": 7})

    async def body() -> BaseException:
        with pytest.raises(durajobs.JobFailed) as raised:
            await handle.result(timeout=20)
        return raised.value

    failure = asyncio.run(_with_worker(registry, database_url, body))

    assert failure.code == "X_JOB_FAILED"
    assert failure.detail["state"] == "dead"
    assert "ValueError: boom 7" in failure.detail["error"]
    # awaited again, it raises the same: the outcome is stored
    with pytest.raises(durajobs.JobFailed):
        handle.wait(timeout=5)


def test_a_failed_job_raises_job_failed_and_a_durajobs_code_raises_its_own_class(database_url):
    registry, jobs = _registry(database_url)
    dropped = jobs["drop"].enqueue({"a": 1})
    timed_out = jobs["slow"].enqueue({"a": 1})

    async def body() -> None:
        with pytest.raises(durajobs.JobFailed) as raised:
            await dropped.result(timeout=20)
        assert raised.value.detail["state"] == "failed"
        # the stored code names a durajobs error: that class is raised
        with pytest.raises(durajobs.JobTimeout) as stored:
            await timed_out.result(timeout=20)
        assert stored.value.detail["error_code"] == "X_JOB_TIMEOUT"

    asyncio.run(_with_worker(registry, database_url, body))


def test_a_cancelled_job_raises_job_cancelled(database_url, client):
    _, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 9, "b": 9})
    client.cancel(handle.id, reason="not needed")

    with pytest.raises(durajobs.JobCancelled) as raised:
        handle.wait(timeout=5)

    assert "not needed" in raised.value.detail["error"]


def test_waiting_inside_the_enqueueing_transaction_is_refused_until_it_commits(database_url):
    registry, jobs = _registry(database_url)
    with psycopg.connect(database_url) as connection:
        handle = jobs["add"].enqueue({"a": 3, "b": 4}, using=connection)
        with pytest.raises(durajobs.JobUncommitted) as raised:
            handle.wait(timeout=5)
        assert raised.value.code == "X_JOB_UNCOMMITTED"
        connection.commit()

    value = asyncio.run(_with_worker(registry, database_url, lambda: handle.result(timeout=20)))

    assert value == {"sum": 7}


def test_waiting_inside_an_open_sqlalchemy_session_is_refused(database_url):
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    _, jobs = _registry(database_url)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(database_url))
    with Session(engine) as session:
        handle = jobs["add"].enqueue({"a": 1, "b": 9}, using=session)
        with pytest.raises(durajobs.JobUncommitted):
            handle.wait(timeout=5)
        session.commit()
    # committed: the job is there to wait for (it times out here, no worker runs)
    with pytest.raises(durajobs.JobResultTimeout):
        handle.wait(timeout=0.2, poll=0.1)
    engine.dispose()


def test_a_rolled_back_enqueue_is_not_found(database_url):
    _, jobs = _registry(database_url)
    with psycopg.connect(database_url) as connection:
        handle = jobs["add"].enqueue({"a": 6, "b": 6}, using=connection)
        connection.rollback()

    with pytest.raises(durajobs.JobNotFound):
        handle.wait(timeout=5)


def test_a_value_that_is_not_json_fails_the_run_at_once_without_retries(database_url):
    registry, jobs = _registry(database_url)
    handle = jobs["not_json"].enqueue({"a": 1})

    async def body() -> None:
        with pytest.raises(durajobs.JobResultInvalid):
            await handle.result(timeout=20)

    asyncio.run(_with_worker(registry, database_url, body))

    assert jobs["not-json-runs"] == 1, "a terminal code: no second attempt"
    ((state, code, attempt),) = fetch_all(
        database_url,
        "select state, last_error_code, attempt from jobs.jobs where id = %s",
        [handle.id],
    )
    assert (state, code, attempt) == ("dead", "X_JOB_RESULT_INVALID", 1)


def test_a_value_the_output_model_refuses_fails_the_run(database_url):
    registry, jobs = _registry(database_url)
    good = jobs["add_dict"].enqueue({"a": 5})
    bad = jobs["add_dict"].enqueue({"a": 6, "b": 1})

    async def body() -> None:
        assert await good.result(timeout=20) == Sum(total=5)
        with pytest.raises(durajobs.JobResultInvalid):
            await bad.result(timeout=20)

    asyncio.run(_with_worker(registry, database_url, body))


def test_sql_reads_a_result_and_an_error_and_refuses_an_unknown_id(database_url, client):
    registry, jobs = _registry(database_url)
    done = jobs["add"].enqueue({"a": 1, "b": 2})
    dead = jobs["boom"].enqueue({"a": 2})
    asyncio.run(
        _with_worker(
            registry,
            database_url,
            lambda: asyncio.gather(
                done.result(timeout=20), dead.result(timeout=20), return_exceptions=True
            ),
        )
    )

    assert fetch_all(
        database_url, "select state, result, error from jobs.result(%s)", [done.id]
    ) == [("done", {"sum": 3}, None)]
    ((state, result, error, code),) = fetch_all(
        database_url, "select state, result, error, error_code from jobs.result(%s)", [dead.id]
    )
    assert (state, result, code) == ("dead", None, None)
    assert "ValueError: boom 2" in error
    assert client.result(done.id) == JobOutcome(
        done.id, JobState.DONE, {"sum": 3}, None, None, client.result(done.id).finished_at
    )
    with pytest.raises(durajobs.JobNotFound):
        client.result(UUID(int=1))


def test_a_result_over_the_size_limit_fails_its_row_in_sql(database_url, client):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("select jobs.set_size_limit('step_output', 2048)")
        job = client.enqueue("big", {}, "big:1", max_attempts=3)
        (claimed,) = client.claim(["default"], "w1")
        small = client.enqueue("small", {}, "small:1")
        (other,) = client.claim(["default"], "w1")
        rows = connection.execute(
            "select id, landed from jobs.ack_results_v1('w1', %s, %s, %s)",
            [
                [claimed.id, other.id],
                [claimed.claim, other.claim],
                [psycopg.types.json.Jsonb({"x": "y" * 5000}), psycopg.types.json.Jsonb([1, 2])],
            ],
        ).fetchall()

    assert rows == [(job.id, True), (small.id, True)]
    assert fetch_all(
        database_url, "select state, last_error_code, result from jobs.jobs where id = %s", [job.id]
    ) == [("failed", "X_JOB_RESULT_INVALID", None)]
    # its neighbour in the batch is acked with its result
    assert fetch_all(
        database_url, "select state, result from jobs.jobs where id = %s", [small.id]
    ) == [("done", [1, 2])]


def test_retention_removes_a_result_with_its_job(database_url, client):
    registry, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 8, "b": 8})
    asyncio.run(_with_worker(registry, database_url, lambda: handle.result(timeout=20)))
    assert client.result(handle.id).result == {"sum": 16}

    client.purge(done_after=timedelta(0))

    assert fetch_all(database_url, "select count(*) from jobs.jobs where id = %s", [handle.id]) == [
        (0,)
    ]
    with pytest.raises(durajobs.JobNotFound):
        client.result(handle.id)


def _notices_of_one_batch_ack(database_url, client, *, registered: bool) -> list[object]:
    """The notices a listener gets from one batch ack of 20 rows."""
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("listen jobs_settled")
        if registered:
            listener.execute("select jobs.await_results_v1(interval '1 minute')")
        for n in range(20):
            client.enqueue("batch", {}, f"batch:{registered}:{n}")
        claimed = client.claim(["default"], "w1", batch_size=20)
        assert len(claimed) == 20
        client.ack_many("w1", [c.id for c in claimed], [c.claim for c in claimed])
        return list(listener.notifies(timeout=0.5))


def test_one_notice_a_settling_statement_while_a_caller_waits(database_url, client):
    notices = _notices_of_one_batch_ack(database_url, client, registered=True)

    assert len(notices) == 1
    # the notice names nothing: another tenant's listener learns only that something settled
    assert notices[0].payload == ""


def test_no_notice_while_nobody_waits(database_url, client):
    # a notifying commit takes a cluster-wide lock: the acks of a fleet nobody awaits skip it
    assert _notices_of_one_batch_ack(database_url, client, registered=False) == []


def test_a_wait_registers_while_it_waits_and_ends_its_registration(database_url):
    _, jobs = _registry(database_url)
    handle = jobs["add"].enqueue({"a": 30, "b": 1})

    async def body() -> int:
        waiting = asyncio.ensure_future(handle.result(timeout=0.5, poll=0.1))
        await asyncio.sleep(0.2)
        (during,) = fetch_all(database_url, "select count(*) from jobs.result_waits")[0]
        with pytest.raises(durajobs.JobResultTimeout):
            await waiting
        return int(during)

    assert asyncio.run(body()) == 1
    assert fetch_all(database_url, "select count(*) from jobs.result_waits") == [(0,)]


def test_a_staged_enqueue_is_awaited_until_the_relay_publishes_it(database_url):
    registry = durajobs.Registry(database_url, outbox=True)

    @registry.job(name="staged", input=Numbers, idempotency_key=lambda i: f"s:{i.a}", tenant="none")
    async def staged(ctx: durajobs.JobContext[Numbers]) -> int:
        return ctx.input.a * 10

    with psycopg.connect(database_url) as connection:
        handle = staged.enqueue({"a": 3}, using=connection)
        connection.commit()
    assert handle.staged

    async def body() -> Any:
        waiting = asyncio.ensure_future(handle.result(timeout=30, poll=0.1))
        await asyncio.sleep(0.5)
        assert not waiting.done(), "nothing published the job yet: the wait goes on"
        relay = OutboxRelay(database_url, listen=False)
        await relay.open()
        try:
            assert await relay.run_once() == 1
        finally:
            await relay.close()
        return await waiting

    assert asyncio.run(_with_worker(registry, database_url, body)) == 30


def test_many_waits_share_nothing_but_the_database(database_url):
    registry, jobs = _registry(database_url)
    handles = [jobs["add"].enqueue({"a": n, "b": 1}) for n in range(10)]
    answers: list[Any] = []

    def wait_all() -> None:
        answers.extend(handle.wait(timeout=20) for handle in handles)

    async def body() -> None:
        thread = threading.Thread(target=wait_all)
        thread.start()
        values = await asyncio.gather(*(handle.result(timeout=20) for handle in handles))
        await asyncio.to_thread(thread.join)
        assert values == [{"sum": n + 1} for n in range(10)]

    asyncio.run(_with_worker(registry, database_url, body))
    assert answers == [{"sum": n + 1} for n in range(10)]


class Score(BaseModel):
    score: float


def test_nan_and_nul_fail_their_own_run_and_never_the_batch_they_would_be_acked_with(
    database_url,
):
    registry = durajobs.Registry(database_url)

    @registry.job(
        name="nan",
        input=Numbers,
        idempotency_key=lambda i: f"nan:{i.a}",
        tenant="none",
        output=Score,
    )
    async def nan(ctx: durajobs.JobContext[Numbers]) -> Score:
        return Score(score=float("nan"))

    @registry.job(name="nul", input=Numbers, idempotency_key=lambda i: f"nul:{i.a}", tenant="none")
    async def nul(ctx: durajobs.JobContext[Numbers]) -> dict[str, str]:
        return {"text": "before\x00after"}

    @registry.job(
        name="fine", input=Numbers, idempotency_key=lambda i: f"fine:{i.a}", tenant="none"
    )
    async def fine(ctx: durajobs.JobContext[Numbers]) -> dict[str, str]:
        # a backslash and the letters u0000 are text, not a NUL
        return {"text": "C:\\u0000", "n": str(ctx.input.a)}

    handles = [nan.enqueue({"a": 1}), nul.enqueue({"a": 1})]
    good = [fine.enqueue({"a": n}) for n in range(5)]

    async def body() -> None:
        for handle in handles:
            with pytest.raises(durajobs.JobResultInvalid):
                await handle.result(timeout=20)
        assert [await handle.result(timeout=20) for handle in good] == [
            {"text": "C:\\u0000", "n": str(n)} for n in range(5)
        ]

    asyncio.run(_with_worker(registry, database_url, body))
    assert fetch_all(
        database_url,
        "select name, state, last_error_code from jobs.jobs where name in ('nan', 'nul')"
        " order by name",
    ) == [("nan", "dead", "X_JOB_RESULT_INVALID"), ("nul", "dead", "X_JOB_RESULT_INVALID")]
