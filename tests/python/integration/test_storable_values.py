"""What a body produces reaches the database in a form the server holds, or fails that attempt
alone: a value the server refuses must never fail the statement it shares with other jobs'
settles (each of those would run again once its lease lapsed)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, ConfigDict

import durajobs
from durajobs._db import calls
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import ArgumentInvalid, JobInputInvalid
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.models import Numbered
from support.rows import fetch_all
from support.running import run_until

BATCH = 12
ODD = 3  # the job whose value the server would refuse as it stands


class Free(BaseModel):
    """An input model that takes any fields."""

    model_config = ConfigDict(extra="allow")


async def _nothing(ctx: Any) -> None:
    return None


def _enqueue(registry: durajobs.Registry, name: str) -> None:
    """Enqueued by the job itself: its declared attempts go with each row."""
    job = registry.get(name)
    for n in range(BATCH):
        job.enqueue({"n": n})


def _by_n(item: Numbered) -> str:
    return str(item.n)


def _rows(database_url: str, name: str) -> dict[int, tuple[str, str | None, str | None]]:
    rows = fetch_all(
        database_url,
        "select (input ->> 'n')::int, state, last_error, last_error_code from jobs.jobs"
        " where name = %s",
        [name],
    )
    return {n: (state, error, code) for n, state, error, code in rows}


def _ended(database_url: str, name: str) -> bool:
    rows = _rows(database_url, name)
    return len(rows) == BATCH and all(state in {"done", "dead"} for state, _, _ in rows.values())


def test_an_error_holding_a_nul_and_a_lone_surrogate_is_stored_escaped(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(
        registry,
        "fails",
        input=Numbered,
        idempotency_key=_by_n,
        retry=RetryPolicy(attempts=1),
    )
    async def fails(ctx: durajobs.JobContext[Numbered]) -> None:
        if ctx.input.n == ODD:
            raise RuntimeError("bytes b\x00c from a file named \udcff.csv")
        raise RuntimeError(f"plain {ctx.input.n}")

    _enqueue(registry, "fails")
    worker = Worker(registry, database_url, listen=False, concurrency=BATCH)
    # every nack of the batch lands, none waits for its lease (30 s, past this wait)
    asyncio.run(run_until(worker, lambda: _ended(database_url, "fails"), timeout=15))
    rows = _rows(database_url, "fails")
    assert {state for state, _, _ in rows.values()} == {"dead"}
    assert rows[ODD][1] is not None
    assert "bytes b\\x00c from a file named \\udcff.csv" in rows[ODD][1]
    assert "plain 5" in (rows[5][1] or "")


def test_a_result_or_a_step_output_jsonb_refuses_fails_its_own_attempt(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "answers", input=Numbered, idempotency_key=_by_n)
    async def answers(ctx: durajobs.JobContext[Numbered]) -> Any:
        if ctx.input.n == ODD:
            return {"file": "\udcff.csv"}  # a lone surrogate: not UTF-8
        if ctx.input.n == ODD + 1:

            async def read() -> str:
                return "a\x00b"

            await ctx.step.run("read", read)
        return {"n": ctx.input.n}

    _enqueue(registry, "answers")
    worker = Worker(registry, database_url, listen=False, concurrency=BATCH)
    asyncio.run(run_until(worker, lambda: _ended(database_url, "answers"), timeout=15))
    rows = _rows(database_url, "answers")
    assert rows[ODD][0] == "dead"
    assert rows[ODD][2] == "X_JOB_RESULT_INVALID"
    assert "lone surrogate" in (rows[ODD][1] or "")
    assert rows[ODD + 1][0] == "dead"
    assert rows[ODD + 1][2] == "X_STEP_OUTPUT_INVALID", "terminal: the step is not run again"
    assert "NUL" in (rows[ODD + 1][1] or "")
    assert sorted(n for n, row in rows.items() if row[0] == "done") == sorted(
        set(range(BATCH)) - {ODD, ODD + 1}
    )


def test_a_handler_that_answers_nothing_awaitable_fails_alone(database_url):
    """A sync wrapper of an async def passes for async (its __wrapped__ is): what it answers
    is no coroutine. The attempt fails; the rest of its batch still starts and completes."""
    registry = durajobs.Registry(database_url=database_url)
    completed: list[int] = []

    async def work(ctx: durajobs.JobContext[Numbered]) -> None:
        completed.append(ctx.input.n)

    @functools.wraps(work)
    def flagged(ctx: durajobs.JobContext[Numbered]) -> Any:
        if ctx.input.n == ODD:
            return None  # the feature is off: nothing to await
        return work(ctx)

    declare(
        registry, "flagged", input=Numbered, idempotency_key=_by_n, retry=RetryPolicy(attempts=1)
    )(flagged)
    _enqueue(registry, "flagged")
    worker = Worker(registry, database_url, listen=False, concurrency=BATCH)
    asyncio.run(run_until(worker, lambda: _ended(database_url, "flagged"), timeout=15))
    rows = _rows(database_url, "flagged")
    assert rows[ODD][0] == "dead"
    assert "TypeError" in (rows[ODD][1] or "")
    assert sorted(completed) == sorted(set(range(BATCH)) - {ODD})


def test_progress_given_as_floats_is_written(database_url):
    with durajobs.Client.connect(database_url) as client:
        client.enqueue("j", {}, "k")
        [claimed] = client.claim(["default"], "w")
        assert client.run(calls.progress(claimed.fence, 0.5, 1.25, "half")) is True
    with psycopg.connect(database_url, autocommit=True) as connection:
        [(progress,)] = connection.execute(
            "select progress from jobs.jobs where id = %s", [claimed.id]
        ).fetchall()
    assert (progress["done"], progress["total"]) == (0.5, 1.25)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"a": "x\x00y"}, "NUL"),
        ({"file": "\udcff.csv"}, "lone surrogate"),
        ({"ratio": float("nan")}, "Out of range float"),
    ],
)
def test_an_input_jsonb_refuses_is_refused_with_its_code_and_nothing_is_stored(
    database_url, value, named
):
    with durajobs.Client.connect(database_url) as client:
        client.enqueue("kept", {"a": 1}, "kept")
        with pytest.raises(JobInputInvalid, match=named):
            client.enqueue("j", value, "k")
        with pytest.raises(JobInputInvalid, match=named):
            client.enqueue_many(
                [
                    {"name": "j", "input": {"a": 2}, "idempotency_key": "fine"},
                    {"name": "j", "input": value, "idempotency_key": "bad"},
                ]
            )
        with pytest.raises(ArgumentInvalid, match=named):
            client.publish_event("e", value)
    names = [name for (name,) in fetch_all(database_url, "select name from jobs.jobs")]
    assert names == ["kept"], "nothing written, nothing lost"


@pytest.mark.parametrize(
    ("value", "named"),
    [({"a": "x\x00y"}, "NUL"), ({"file": "\udcff.csv"}, "lone surrogate")],
)
def test_a_declared_jobs_input_jsonb_refuses_is_refused_with_its_code(database_url, value, named):
    """(A NaN never reaches the check this way: pydantic writes it as null.)"""
    registry = durajobs.Registry(database_url=database_url)
    declare(registry, "free", input=Free, idempotency_key=lambda _input: "k")(_nothing)
    with pytest.raises(JobInputInvalid, match=named):
        registry.get("free").enqueue(value)
    assert fetch_all(database_url, "select name from jobs.jobs") == []
