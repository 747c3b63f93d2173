"""Fan-out and fan-in: one parent enqueues 1,000 children (all in one step with
`ctx.step.enqueue_many`, or one step each with `ctx.step.enqueue`), parks with
`ctx.step.wait_for`, and resumes with their results; timed against the same 1,000 children
enqueued from outside in one statement and drained by the same worker (no parent).

    bench/fanout.py --database-url URL [--children 1000] [--reps 3] [--out FILE]
    (drops and re-creates the schema `jobs` there)

Reports, per repetition: the fan-out's seconds from the parent's enqueue to its result, the
plain drain's seconds, their ratio, and how many times the parent was claimed (1 for the run that
enqueues and parks, 1 for the resume, more for each wake that found a child still live).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel

import durajobs
from durajobs.runtime.worker import Worker


class Child(BaseModel):
    i: int


class Parent(BaseModel):
    n: int
    rep: int
    each: bool = False  # one step a child instead of one step for all


def _registry(url: str) -> tuple[durajobs.Registry, Any, Any]:
    registry = durajobs.Registry(database_url=url)

    @registry.job(name="child", input=Child, idempotency_key=lambda c: str(c.i), tenant="none")
    async def child(ctx: durajobs.JobContext[Child]) -> int:
        return ctx.input.i

    @registry.job(
        name="parent", input=Parent, idempotency_key=lambda p: f"p:{p.rep}", tenant="none"
    )
    async def parent(ctx: durajobs.JobContext[Parent]) -> int:
        base = ctx.input.rep * 1_000_000
        inputs = [{"i": base + i} for i in range(ctx.input.n)]
        if ctx.input.each:
            children = [await ctx.step.enqueue(child, one) for one in inputs]
        else:
            children = await ctx.step.enqueue_many(child, inputs)
        results = await ctx.step.wait_for(*children)
        return sum(results)

    return registry, child, parent


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("drop schema if exists jobs cascade")
    durajobs.migrate(url)


async def _fan_out(url: str, n: int, rep: int, each: bool) -> tuple[float, int]:
    registry, _child, parent = _registry(url)
    worker = Worker(registry, url, concurrency=100)
    runner = asyncio.ensure_future(worker.run())
    try:
        await asyncio.sleep(0.5)  # the worker is up before the clock starts
        began = time.perf_counter()
        handle = await parent.enqueue_async({"n": n, "rep": rep, "each": each})
        total = await handle.result(timeout=600)
        seconds = time.perf_counter() - began
        base = rep * 1_000_000
        assert total == sum(base + i for i in range(n)), "a child's result was lost"
    finally:
        worker.stop()
        await runner
    with psycopg.connect(url, autocommit=True) as connection:
        (claims,) = connection.execute(
            "select claims from jobs.jobs where id = %s", [handle.id]
        ).fetchone() or (0,)
        (children,) = connection.execute(
            "select count(*) from jobs.jobs where parent_id = %s and state = 'done'", [handle.id]
        ).fetchone() or (0,)
    assert children == n, f"{children} children done of {n}"
    return seconds, int(claims)


async def _plain(url: str, n: int, rep: int) -> float:
    registry, _child, _parent = _registry(url)
    base = (rep + 100) * 1_000_000
    with durajobs.Client.connect(url) as client:
        began = time.perf_counter()
        client.enqueue_many(
            [
                {"name": "child", "input": {"i": base + i}, "idempotency_key": str(base + i)}
                for i in range(n)
            ]
        )
    worker = Worker(registry, url, concurrency=100)
    runner = asyncio.ensure_future(worker.run())
    try:
        while True:
            with psycopg.connect(url, autocommit=True) as connection:
                (left,) = connection.execute(
                    "select count(*) from jobs.jobs_live where name = 'child'"
                ).fetchone() or (0,)
            if left == 0:
                break
            await asyncio.sleep(0.01)
        return time.perf_counter() - began
    finally:
        worker.stop()
        await runner


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    url, n = args.database_url, args.children

    _reset(url)
    rows = []
    for rep in range(args.reps):
        fan, claims = asyncio.run(_fan_out(url, n, 2 * rep, each=False))
        each, each_claims = asyncio.run(_fan_out(url, n, 2 * rep + 1, each=True))
        plain = asyncio.run(_plain(url, n, rep))
        rows.append((fan, each, plain, claims, each_claims))
        print(
            f"rep {rep + 1}: enqueue_many {fan:.2f} s ({claims} claims), one step each "
            f"{each:.2f} s ({each_claims} claims), plain {plain:.2f} s",
            file=sys.stderr,
        )

    lines = [
        f"# Fan-out and fan-in: 1 parent, {n:,} children",
        "",
        "One Worker (concurrency 100) on one database. *Fan-out*: from the parent's enqueue to its"
        " awaited result: the parent enqueues its children (all in one step with"
        " `step.enqueue_many`, or one step each with `step.enqueue`), parks, and is woken by the"
        " last child's settle. *Plain*: the same number of children enqueued from outside in one"
        " `jobs.enqueue_many` and drained by the same worker, no parent. Claims: how many times"
        " the parent was claimed (1 when every child had settled by the time it waited).",
        "",
        "| rep | enqueue_many s | one step each s | plain s | enqueue_many / plain |"
        " one step each / plain | claims |",
        "|---|---|---|---|---|---|---|",
    ]
    for rep, (fan, each, plain, claims, each_claims) in enumerate(rows, start=1):
        lines.append(
            f"| {rep} | {fan:.2f} | {each:.2f} | {plain:.2f} | {fan / plain:.2f}x |"
            f" {each / plain:.2f}x | {claims}, {each_claims} |"
        )
    fan_m = statistics.median(r[0] for r in rows)
    each_m = statistics.median(r[1] for r in rows)
    plain_m = statistics.median(r[2] for r in rows)
    lines += [
        f"| median | {fan_m:.2f} | {each_m:.2f} | {plain_m:.2f} | {fan_m / plain_m:.2f}x |"
        f" {each_m / plain_m:.2f}x | |",
        "",
    ]
    text = "\n".join(lines)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
