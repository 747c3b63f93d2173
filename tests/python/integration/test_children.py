"""Child runs: `ctx.step.enqueue` enqueues a child once per run (a replay answers the same one),
and `ctx.step.wait_for` parks the parent, holding no slot, until every child has settled; the
last child's settle wakes it (the poll is only the guarantee behind the wake), and it resumes
once with the children's results in the order given, or their errors. A cancel can cascade to
the children; a child names its parent, of its own tenant only; the operator sees the children.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from pydantic import BaseModel

import durajobs
from durajobs._db import calls
from durajobs.runtime.worker import Worker
from support.paths import TESTS
from support.rows import fetch_all
from support.running import run_until

HOUR = timedelta(hours=1)


class N(BaseModel):
    n: int
    seconds: float = 0.0


class Square(BaseModel):
    sq: int


def _registry(database_url):
    return durajobs.Registry(database_url=database_url)


def _declare(registry, name, **options):
    """Declare a job taking N; every enqueue gets a key of its own unless `options` say so, so
    only the step record can keep a replay from enqueueing a second child."""
    options.setdefault("idempotency_key", lambda _input: uuid.uuid4().hex)
    options.setdefault("tenant", "none")
    return registry.job(name=name, input=N, **options)


def _square(registry, **options):
    @_declare(registry, "square", **options)
    async def square(ctx):
        await asyncio.sleep(ctx.input.seconds)
        return {"sq": ctx.input.n * ctx.input.n}

    return square


def _one(database_url, query, params=()):
    rows = fetch_all(database_url, query, params)
    assert len(rows) == 1, rows
    return rows[0]


def _job(database_url, id):
    """(state, attempt, claims, result, last_error_code) of the job."""
    return _one(
        database_url,
        "select state, attempt, claims, result, last_error_code from jobs.jobs where id = %s",
        [id],
    )


def _state(database_url, id):
    return _one(database_url, "select state from jobs.jobs where id = %s", [id])[0]


def _finished(database_url, id):
    return _state(database_url, id) in ("done", "failed", "dead", "cancelled")


def _run(registry, database_url, done, *, timeout=20.0, **options):
    options.setdefault("concurrency", 10)
    worker = Worker(registry, database_url, **options)
    asyncio.run(run_until(worker, done, timeout=timeout))


# -- fan out, fan in --------------------------------------------------------------------------


def test_a_parent_of_five_children_resumes_once_with_their_results_in_order(database_url):
    registry = _registry(database_url)
    square = _square(registry)
    after_wait: list[list[object]] = []

    @_declare(registry, "fan")
    async def fan(ctx):
        # the first child takes longest: the children settle in the reverse of the order given
        kids = [
            await ctx.step.enqueue(square, {"n": k, "seconds": 0.1 * (5 - k)}) for k in range(5)
        ]
        results = await ctx.step.wait_for(*kids)
        after_wait.append(results)
        return sum(r["sq"] for r in results)

    parent = fan.enqueue({"n": 5})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    assert after_wait == [[{"sq": 0}, {"sq": 1}, {"sq": 4}, {"sq": 9}, {"sq": 16}]]
    # claimed twice: the attempt that parked, and the one resumed; the park gave its attempt back
    assert _job(database_url, parent.id) == ("done", 1, 2, 30, None)
    children = fetch_all(
        database_url,
        "select id, parent_id, state, result from jobs.jobs where name = 'square'"
        " order by created_at, id",
    )
    assert len(children) == 5
    assert {row[1] for row in children} == {parent.id}
    assert [row[2:] for row in children] == [("done", {"sq": k * k}) for k in range(5)]
    with durajobs.Client.connect(database_url) as client:
        listed = client.children(parent.id)
    assert [child.id for child in listed] == [row[0] for row in children]
    assert [(child.name, child.state, child.result) for child in listed] == [
        ("square", durajobs.JobState.DONE, {"sq": k * k}) for k in range(5)
    ]


def test_a_parent_waits_without_a_slot_so_one_slot_runs_it_and_its_children(database_url):
    registry = _registry(database_url)
    square = _square(registry)

    @_declare(registry, "fan")
    async def fan(ctx):
        kids = [await ctx.step.enqueue(square, {"n": k}) for k in range(3)]
        return [r["sq"] for r in await ctx.step.wait_for(*kids)]

    parent = fan.enqueue({"n": 3})
    # a parent holding its slot while it waits would leave none for its children: the poll (5
    # minutes) would be the only way on, far past this timeout
    _run(registry, database_url, lambda: _finished(database_url, parent.id), concurrency=1)
    assert _job(database_url, parent.id)[:4] == ("done", 1, 2, [0, 1, 4])


def test_a_child_declaring_an_output_model_answers_the_model(database_url):
    registry = _registry(database_url)
    square = _square(registry, output=Square)
    seen: list[object] = []

    @_declare(registry, "fan")
    async def fan(ctx):
        kids = [await ctx.step.enqueue(square, {"n": k}) for k in (2, 3)]
        seen.extend(await ctx.step.wait_for(*kids))

    parent = fan.enqueue({"n": 2})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))
    assert seen == [Square(sq=4), Square(sq=9)]


def test_a_replayed_parent_gets_the_same_children(database_url):
    registry = _registry(database_url)
    square = _square(registry)
    attempts: list[int] = []

    @_declare(registry, "fan", retry=durajobs.RetryPolicy.of(attempts=3, delay="10ms"))
    async def fan(ctx):
        kids = [await ctx.step.enqueue(square, {"n": k}) for k in range(4)]
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise RuntimeError("the first attempt fails after its enqueues")
        return sum(r["sq"] for r in await ctx.step.wait_for(*kids))

    parent = fan.enqueue({"n": 4})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    assert len(attempts) >= 2
    state, _attempt, _claims, result, _code = _job(database_url, parent.id)
    assert (state, result) == ("done", 14)
    # each child's key is its own: only the replayed step records kept the retry from
    # enqueueing four more
    assert fetch_all(
        database_url,
        "select count(*), count(distinct idempotency_key) from jobs.jobs where parent_id = %s",
        [parent.id],
    ) == [(4, 4)]


def test_enqueue_many_makes_every_child_in_one_step_and_a_replay_makes_none(database_url):
    registry = _registry(database_url)
    square = _square(registry)
    attempts: list[int] = []

    @_declare(registry, "fan", retry=durajobs.RetryPolicy.of(attempts=3, delay="10ms"))
    async def fan(ctx):
        kids = await ctx.step.enqueue_many(square, [{"n": k} for k in range(50)])
        assert await ctx.step.enqueue_many(square, []) == []
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            raise RuntimeError("the first attempt fails after its enqueue")
        return sum(r["sq"] for r in await ctx.step.wait_for(*kids))

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    state, _attempt, _claims, result, _code = _job(database_url, parent.id)
    assert (state, result) == ("done", sum(k * k for k in range(50)))
    assert fetch_all(
        database_url, "select count(*) from jobs.jobs where parent_id = %s", [parent.id]
    ) == [(50,)]
    # one step for the fifty, holding their ids in order
    [(output,)] = fetch_all(
        database_url,
        "select output from jobs.steps where run_id = %s and name like 'enqueue:%%'",
        [parent.id],
    )
    ids = [
        row[0]
        for row in fetch_all(
            database_url,
            "select id from jobs.jobs where parent_id = %s order by (input ->> 'n')::int",
            [parent.id],
        )
    ]
    assert output["enqueued"] == [str(id) for id in ids]
    assert output["deduped"] == [False] * 50


def test_a_child_of_another_tenant_is_refused_and_nothing_is_enqueued(database_url):
    registry = _registry(database_url)

    @registry.job(
        name="tenanted",
        input=N,
        idempotency_key=lambda i: f"t:{i.n}",
        tenant=lambda i: f"tenant-{i.n}",
    )
    async def tenanted(ctx):
        return ctx.input.n

    @registry.job(
        name="fan",
        input=N,
        idempotency_key=lambda i: f"f:{i.n}",
        tenant=lambda i: "tenant-1",
        retry=durajobs.RetryPolicy.of(attempts=1),
    )
    async def fan(ctx):
        # the first is the parent's tenant, the second is not: the step takes neither
        await ctx.step.enqueue_many(tenanted, [{"n": 1}, {"n": 2}])

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    state, _attempt, _claims, _result, code = _job(database_url, parent.id)
    assert (state, code) == ("dead", "X_ARGUMENT_INVALID")
    assert fetch_all(database_url, "select count(*) from jobs.jobs where name = 'tenanted'") == [
        (0,)
    ]


def test_a_plain_def_parent_enqueues_and_waits_with_the_sync_step_api(database_url):
    registry = _registry(database_url)
    square = _square(registry)

    @_declare(registry, "fan")
    def fan(ctx):
        kids = [ctx.step.enqueue(square, {"n": k, "seconds": 0.2}) for k in range(3)]
        assert all(isinstance(kid, durajobs.JobHandle) for kid in kids)
        return [r["sq"] for r in ctx.step.wait_for(*kids)]

    parent = fan.enqueue({"n": 3})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))
    # the children outlast the first attempt: it parked, and the second answered
    assert _job(database_url, parent.id) == ("done", 1, 2, [0, 1, 4], None)
    assert fetch_all(
        database_url, "select count(*) from jobs.jobs where parent_id = %s", [parent.id]
    ) == [(3,)]


# -- failures ---------------------------------------------------------------------------------


def _failing_fan(registry, *, return_exceptions, sink):
    square = _square(registry)

    @_declare(registry, "broken", retry=durajobs.RetryPolicy.of(attempts=1))
    async def broken(ctx):
        await asyncio.sleep(0.2)
        raise ValueError("the child gives up")

    @_declare(registry, "fan", retry=durajobs.RetryPolicy.of(attempts=5, delay="10ms"))
    async def fan(ctx):
        kids = [
            await ctx.step.enqueue(square, {"n": 1}),
            await ctx.step.enqueue(broken, {"n": 2}),
            await ctx.step.enqueue(square, {"n": 3}),
        ]
        results = await ctx.step.wait_for(*kids, return_exceptions=return_exceptions)
        sink.append(results)
        return [type(r).__name__ for r in results]

    return fan


def test_a_failed_child_dead_letters_its_parent_without_retries(database_url):
    registry = _registry(database_url)
    sink: list[object] = []
    fan = _failing_fan(registry, return_exceptions=False, sink=sink)

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    assert sink == []
    # X_JOB_FAILED is terminal: dead on the attempt that read the failure, four attempts unused
    state, attempt, _claims, _result, code = _job(database_url, parent.id)
    assert (state, attempt, code) == ("dead", 1, "X_JOB_FAILED")
    (error,) = _one(database_url, "select last_error from jobs.jobs where id = %s", [parent.id])
    assert "the child gives up" in error


def test_with_return_exceptions_a_failed_child_takes_its_place_in_the_list(database_url):
    registry = _registry(database_url)
    sink: list[list[object]] = []
    fan = _failing_fan(registry, return_exceptions=True, sink=sink)

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    [results] = sink
    assert results[0] == {"sq": 1}
    assert results[2] == {"sq": 9}
    assert isinstance(results[1], durajobs.JobFailed)
    assert results[1].code == "X_JOB_FAILED"
    assert "the child gives up" in str(results[1])
    state, _attempt, _claims, result, _code = _job(database_url, parent.id)
    assert (state, result) == ("done", ["dict", "JobFailed", "dict"])


# -- the wake and the poll --------------------------------------------------------------------


def _parked_until(database_url, id):
    """How long from now the parked job is due, on the database's clock."""
    (left,) = _one(
        database_url,
        "select run_at - now() from jobs.jobs where id = %s and state = 'suspended'",
        [id],
    )
    return left


def _parked_for_its_poll(database_url, id):
    """Whether the job is still parked and not due: nothing has woken it."""
    (parked,) = _one(
        database_url,
        "select state = 'suspended' and run_at > now() + interval '1 minute' from jobs.jobs"
        " where id = %s",
        [id],
    )
    return parked


def _promote(database_url, ids):
    with durajobs.Client.connect(database_url) as client:
        for id in ids:
            assert client.run(calls.promote(id))


def test_the_last_childs_settle_wakes_the_parent_long_before_its_poll(database_url):
    registry = _registry(database_url)
    square = _square(registry)

    @_declare(registry, "fan")
    async def fan(ctx):
        kids = [await ctx.step.enqueue(square, {"n": k}, delay="1h") for k in range(3)]
        return [r["sq"] for r in await ctx.step.wait_for(*kids, poll=HOUR)]

    parent = fan.enqueue({"n": 3})
    _run(registry, database_url, lambda: _state(database_url, parent.id) == "suspended")
    assert _parked_until(database_url, parent.id) > timedelta(minutes=59)
    children = [
        row[0]
        for row in fetch_all(
            database_url,
            "select id from jobs.jobs where parent_id = %s order by created_at, id",
            [parent.id],
        )
    ]
    assert len(children) == 3

    # two of three settle: the parent sleeps on, still due at its poll
    _promote(database_url, children[:2])
    _run(
        registry,
        database_url,
        lambda: all(_state(database_url, id) == "done" for id in children[:2]),
    )
    assert _parked_until(database_url, parent.id) > timedelta(minutes=59)

    # the last one's settle makes it due at once: done in seconds, not in an hour
    _promote(database_url, children[2:])
    started = time.monotonic()
    _run(registry, database_url, lambda: _finished(database_url, parent.id), timeout=10)
    assert time.monotonic() - started < 10
    assert _job(database_url, parent.id)[:4] == ("done", 1, 2, [0, 1, 4])


def _waiting_on_a_delayed_child(registry, sink, *, poll):
    """A parent waiting (return_exceptions) on a quick child and on one due in an hour."""
    square = _square(registry)

    @_declare(registry, "fan")
    async def fan(ctx):
        kids = [
            await ctx.step.enqueue(square, {"n": 2}),
            await ctx.step.enqueue(square, {"n": 3}, delay="1h"),
        ]
        results = await ctx.step.wait_for(*kids, return_exceptions=True, poll=poll)
        sink.append(results)
        return [type(r).__name__ for r in results]

    return fan


def _parked_on_the_delayed_child(database_url, parent_id):
    """The parent is parked, its quick child done and the other still delayed."""
    children = fetch_all(
        database_url, "select state from jobs.jobs where parent_id = %s order by state", [parent_id]
    )
    return _state(database_url, parent_id) == "suspended" and children == [
        ("delayed",),
        ("done",),
    ]


def _delayed_child(database_url, parent_id):
    rows = fetch_all(
        database_url,
        "select id from jobs.jobs where parent_id = %s and state = 'delayed'",
        [parent_id],
    )
    return rows[0][0] if rows else None


def test_a_parent_resumed_by_its_poll_while_a_child_is_live_parks_again(database_url):
    registry = _registry(database_url)
    sink: list[list[object]] = []
    fan = _waiting_on_a_delayed_child(registry, sink, poll=timedelta(seconds=1))
    parent = fan.enqueue({"n": 0})

    # parked, polled, parked again: a third claim that still found the child live
    _run(
        registry,
        database_url,
        lambda: _job(database_url, parent.id)[:3] == ("suspended", 0, 3),
        poll_floor=0.05,
        idle_ceiling=0.2,
    )
    assert sink == []
    _promote(database_url, [_delayed_child(database_url, parent.id)])
    _run(registry, database_url, lambda: _finished(database_url, parent.id))
    assert sink == [[{"sq": 4}, {"sq": 9}]]
    assert _job(database_url, parent.id)[0] == "done"


def test_a_child_removed_from_under_its_parent_answers_job_not_found_at_the_poll(database_url):
    registry = _registry(database_url)
    sink: list[list[object]] = []
    fan = _waiting_on_a_delayed_child(registry, sink, poll=timedelta(seconds=1))
    parent = fan.enqueue({"n": 0})

    _run(
        registry,
        database_url,
        lambda: _parked_on_the_delayed_child(database_url, parent.id),
    )
    child = _delayed_child(database_url, parent.id)
    fetch_all(database_url, "select jobs.remove(%s)", [child])  # no settle: nothing wakes it
    _run(registry, database_url, lambda: _finished(database_url, parent.id))

    [results] = sink
    assert results[0] == {"sq": 4}
    # a child gone from under its parent is a failure of the wait, like any other ending
    assert isinstance(results[1], durajobs.JobFailed)
    assert results[1].detail["state"] is None
    assert isinstance(results[1].__cause__, durajobs.JobNotFound)
    assert str(child) in str(results[1])
    assert _job(database_url, parent.id)[0] == "done"


def test_a_child_shared_by_two_parents_wakes_both(database_url):
    registry = _registry(database_url)
    # keyed by its input: the second parent's enqueue answers the first parent's live child
    square = _square(registry, idempotency_key=lambda i: f"sq:{i.n}")

    @_declare(registry, "fan")
    async def fan(ctx):
        kid = await ctx.step.enqueue(square, {"n": 7}, delay="1h")
        return [r["sq"] for r in await ctx.step.wait_for(kid, poll=HOUR)]

    first, second = fan.enqueue({"n": 1}), fan.enqueue({"n": 2})
    _run(
        registry,
        database_url,
        lambda: {_state(database_url, first.id), _state(database_url, second.id)} == {"suspended"},
    )
    [(child, parent_id)] = fetch_all(
        database_url, "select id, parent_id from jobs.jobs where name = 'square'"
    )
    # one row: the parent that ran second was answered the other's child (deduped)
    assert parent_id in (first.id, second.id)
    other = second.id if parent_id == first.id else first.id
    _promote(database_url, [child])
    _run(registry, database_url, lambda: _state(database_url, child) == "done")
    # the shared child's settle woke both parents, not just the one its parent_id names
    assert not _parked_for_its_poll(database_url, parent_id)
    assert not _parked_for_its_poll(database_url, other)
    _run(
        registry,
        database_url,
        lambda: _finished(database_url, first.id) and _finished(database_url, second.id),
        timeout=10,
    )
    assert _job(database_url, first.id)[3] == [49]
    assert _job(database_url, second.id)[3] == [49]


def test_a_child_buried_after_its_final_lease_lapsed_wakes_its_parent(database_url):
    registry = _registry(database_url)
    square = _square(registry, retry=durajobs.RetryPolicy.of(attempts=1))

    @_declare(registry, "fan")
    async def fan(ctx):
        kid = await ctx.step.enqueue(square, {"n": 3}, delay="1h")
        [outcome] = await ctx.step.wait_for(kid, return_exceptions=True, poll=HOUR)
        return type(outcome).__name__

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _state(database_url, parent.id) == "suspended")
    [(child,)] = fetch_all(database_url, "select id from jobs.jobs where name = 'square'")
    _promote(database_url, [child])
    with durajobs.Client.connect(database_url) as client:
        # a worker that dies holding the child's only attempt: its lease lapses in 200 ms
        [claimed] = client.claim(["default"], "gone", visibility=timedelta(milliseconds=200))
    assert claimed.id == child
    time.sleep(0.3)
    # a worker's claim buries the child (dead): that ending wakes the parent, as a settle does
    _run(registry, database_url, lambda: _finished(database_url, child))
    assert _one(database_url, "select state, last_error from jobs.jobs where id = %s", [child]) == (
        "dead",
        "LEASE_LAPSED_FINAL_ATTEMPT",
    )
    assert not _parked_for_its_poll(database_url, parent.id)
    _run(registry, database_url, lambda: _finished(database_url, parent.id), timeout=10)
    state, attempt, claims, result, _code = _job(database_url, parent.id)
    assert (state, attempt, result) == ("done", 1, "JobFailed")
    # 2 claims, or 3 when the stop after the burial drained a resume already under way (that
    # attempt went back uncounted)
    assert claims in (2, 3)


def test_a_child_drained_by_an_operator_wakes_its_parent(database_url):
    registry = _registry(database_url)
    square = _square(registry)

    @_declare(registry, "fan")
    async def fan(ctx):
        kid = await ctx.step.enqueue(square, {"n": 3}, delay="1h")
        return await ctx.step.wait_for(kid, poll=HOUR)

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _state(database_url, parent.id) == "suspended")
    [(child,)] = fetch_all(database_url, "select id from jobs.jobs where name = 'square'")
    with durajobs.Client.connect(database_url) as client:
        assert client.run(calls.drain(child))  # done by hand: it ends as done, with no result
    assert not _parked_for_its_poll(database_url, parent.id)
    _run(registry, database_url, lambda: _finished(database_url, parent.id), timeout=10)
    assert _job(database_url, parent.id)[:4] == ("done", 1, 2, [None])


def test_a_child_that_timed_out_dead_letters_its_parent_at_once(database_url):
    registry = _registry(database_url)
    attempts: list[int] = []

    @_declare(registry, "slow", timeout="100ms", retry=durajobs.RetryPolicy.of(attempts=1))
    async def slow(ctx):
        await asyncio.sleep(5)

    @_declare(registry, "fan", retry=durajobs.RetryPolicy.of(attempts=3, delay="10ms"))
    async def fan(ctx):
        kid = await ctx.step.enqueue(slow, {"n": 0})
        attempts.append(1)
        await ctx.step.wait_for(kid)

    parent = fan.enqueue({"n": 0})
    _run(registry, database_url, lambda: _finished(database_url, parent.id))
    (child_code,) = _one(database_url, "select last_error_code from jobs.jobs where name = 'slow'")
    state, attempt, _claims, _result, code = _job(database_url, parent.id)
    # the parent reads the child's ending as X_JOB_FAILED, not as a deadline of its own
    assert (child_code, code) == ("X_JOB_TIMEOUT", "X_JOB_FAILED")
    # the child's ending is replayed from the step on every attempt: retrying cannot help, so
    # the parent is dead-lettered by the attempt that read it
    assert (state, attempt, len(attempts)) == ("dead", 1, 2)


# -- cancels ----------------------------------------------------------------------------------


def _tree(registry):
    """top -> middle (runs at once) -> leaf (due in an hour), and top -> a leaf due in an hour:
    both waits park, with live descendants two deep."""

    @_declare(registry, "leaf")
    async def leaf(ctx):
        return ctx.input.n

    @_declare(registry, "middle")
    async def middle(ctx):
        kid = await ctx.step.enqueue(leaf, {"n": 1}, delay="1h")
        return await ctx.step.wait_for(kid, poll=HOUR)

    @_declare(registry, "top")
    async def top(ctx):
        kids = [
            await ctx.step.enqueue(middle, {"n": 0}),
            await ctx.step.enqueue(leaf, {"n": 2}, delay="1h"),
        ]
        return await ctx.step.wait_for(*kids, poll=HOUR)

    return top


def _descendants(database_url, id):
    return fetch_all(
        database_url,
        """with recursive tree(id) as (
             select id from jobs.jobs where parent_id = %(id)s
             union
             select c.id from jobs.jobs c join tree t on c.parent_id = t.id)
           select j.name, j.state, j.last_error from jobs.jobs j join tree t using (id)
            order by j.name""",
        {"id": id},
    )


def _parked_tree(registry, database_url):
    top = _tree(registry)
    parent = top.enqueue({"n": 0})

    def parked():
        states = fetch_all(
            database_url, "select name, state from jobs.jobs where name in ('top', 'middle')"
        )
        return sorted(states) == [("middle", "suspended"), ("top", "suspended")]

    _run(registry, database_url, parked)
    return parent


def test_a_cancel_with_children_cancels_every_live_descendant(database_url):
    registry = _registry(database_url)
    parent = _parked_tree(registry, database_url)

    with durajobs.Client.connect(database_url) as client:
        assert client.cancel(parent.id, reason="stop it", children=True)

    assert _state(database_url, parent.id) == "cancelled"
    descendants = _descendants(database_url, parent.id)
    assert [(name, state) for name, state, _ in descendants] == [
        ("leaf", "cancelled"),
        ("leaf", "cancelled"),
        ("middle", "cancelled"),
    ]
    assert all(error == f"cancelled with job {parent.id}: stop it" for _, _, error in descendants)


def test_a_cancel_without_children_leaves_the_children_live(database_url):
    registry = _registry(database_url)
    parent = _parked_tree(registry, database_url)

    with durajobs.Client.connect(database_url) as client:
        assert client.cancel(parent.id)

    assert _state(database_url, parent.id) == "cancelled"
    assert [(name, state) for name, state, _ in _descendants(database_url, parent.id)] == [
        ("leaf", "delayed"),
        ("leaf", "delayed"),
        ("middle", "suspended"),
    ]


def test_a_cancelled_child_wakes_its_parent_with_a_failure_not_a_cancel(database_url):
    registry = _registry(database_url)
    sink: list[list[object]] = []
    fan = _waiting_on_a_delayed_child(registry, sink, poll=HOUR)
    parent = fan.enqueue({"n": 0})

    _run(
        registry,
        database_url,
        lambda: _parked_on_the_delayed_child(database_url, parent.id),
    )
    child = _delayed_child(database_url, parent.id)
    with durajobs.Client.connect(database_url) as client:
        assert client.cancel(child, reason="not needed")
    # the cancel made the parked parent due now, not in an hour
    assert _one(
        database_url, "select run_at <= now() from jobs.jobs where id = %s", [parent.id]
    ) == (True,)
    _run(registry, database_url, lambda: _finished(database_url, parent.id), timeout=10)

    [results] = sink
    assert results[0] == {"sq": 4}
    # JobFailed, never JobCancelled: that would read as the parent's own cancel
    assert isinstance(results[1], durajobs.JobFailed)
    assert results[1].detail["state"] == "cancelled"
    assert isinstance(results[1].__cause__, durajobs.JobCancelled)
    assert "not needed" in str(results[1])
    assert _job(database_url, parent.id)[:4] == ("done", 1, 2, ["dict", "JobFailed"])


# -- the SQL surface --------------------------------------------------------------------------


def test_enqueue_refuses_a_parent_of_another_tenant(client):
    parent = client.enqueue("op", {"k": 1}, "p", tenant_id="acme")
    with pytest.raises(durajobs.ArgumentInvalid) as refused:
        client.enqueue("op", {"k": 2}, "c", tenant_id="globex", parent_id=parent.id)
    assert "parent_id" in str(refused.value)
    with pytest.raises(durajobs.ArgumentInvalid):
        client.enqueue("op", {"k": 3}, "d", tenant_id="acme", parent_id=uuid.uuid4())
    assert client.connection.execute("select count(*) from jobs.jobs").fetchone() == (1,)
    # the parent's own tenant may
    child = client.enqueue("op", {"k": 4}, "e", tenant_id="acme", parent_id=parent.id)
    assert client.connection.execute(
        "select parent_id from jobs.jobs where id = %s", [child.id]
    ).fetchone() == (parent.id,)


def test_children_answers_nothing_for_another_tenants_parent(client):
    parent = client.enqueue("op", {"k": 1}, "p", tenant_id="acme")
    child = client.enqueue("op", {"k": 2}, "c", tenant_id="acme", parent_id=parent.id)

    def listed(tenant):
        return client.connection.execute(
            "select id from jobs.children(%s, tenant_id => %s)", [parent.id, tenant]
        ).fetchall()

    assert listed("acme") == [(child.id,)]
    assert listed("globex") == []


# -- the operator's view ----------------------------------------------------------------------


def _durajobs(database_url, *args):
    """Run the `durajobs` command as an operator would; answer what it printed."""
    ran = subprocess.run(
        [sys.executable, "-m", "durajobs.cli", *args, "--database-url", database_url],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_jobs_show_prints_the_parent_and_the_children(client, database_url):
    parent = client.enqueue("op", {"k": 1}, "p")
    kids = [client.enqueue("op", {"k": k}, f"c{k}", parent_id=parent.id) for k in range(3)]
    client.cancel(kids[0].id)

    text = _durajobs(database_url, "jobs", "show", str(parent.id))
    [children_line] = [line for line in text.splitlines() if line.strip().startswith("children")]
    assert "3 (1 cancelled, 2 ready)" in children_line
    shown = json.loads(_durajobs(database_url, "jobs", "show", str(parent.id), "--json"))
    assert shown["children"]["total"] == 3
    assert shown["children"]["states"] == {"cancelled": 1, "ready": 2}
    assert [c["id"] for c in shown["children"]["first"]] == [str(k.id) for k in kids]
    text = _durajobs(database_url, "jobs", "show", str(kids[1].id))
    [parent_line] = [line for line in text.splitlines() if line.strip().startswith("parent")]
    assert str(parent.id) in parent_line


def test_jobs_cancel_with_children_on_the_command_line_cancels_them(client, database_url):
    parent = client.enqueue("op", {"k": 1}, "p")
    kids = [client.enqueue("op", {"k": k}, f"c{k}", parent_id=parent.id) for k in range(2)]
    grandchild = client.enqueue("op", {"k": 9}, "g", parent_id=kids[0].id)
    bystander = client.enqueue("op", {"k": 5}, "b")

    _durajobs(database_url, "jobs", "cancel", str(parent.id), "--children")

    states = dict(client.connection.execute("select id, state from jobs.jobs").fetchall())
    assert states == {
        parent.id: "cancelled",
        kids[0].id: "cancelled",
        kids[1].id: "cancelled",
        grandchild.id: "cancelled",
        bystander.id: "ready",
    }
