"""The floor under the durajobs worker, measured as a system (bench/CONTRACT.md): the burn-down,
the steady state beside durajobs' own producer, and the pickup.

The loop of ../shared/probe/pyceiling.py's dj-pipe mode on durajobs' own functions: claim a
batch with jobs.claim_v1 (no lapsed recovery), await one no-op `async def` per row, ack the
batch with jobs.ack_many_v1 on a second connection while the next claim is sent. No leases kept,
no steps, no fencing beyond the SQL's: what one job costs in SQL and the least Python can do. The
report's "durajobs / durajobs-floor" is how close the Worker comes to it.

Its pickup is the least an idle Python process can do on the same functions: a session that
LISTENs on the wake channel, and on each notification one jobs.claim_v1 on a connection of its
own, the row's no-op run and its ack; a 250 ms poll in case a wake is missed.

Run as `python bench/systems/durajobs_floor_system.py <action> --database-url URL [options]`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import durajobs_system
import psycopg
from contract import Actions, Tally, emit, main

from durajobs._db.calls import WAKE_CHANNEL
from durajobs.runtime.loop import run as run_loop

BATCH = 500
CONFIG = f"claim_v1 batch {BATCH} + ack_many_v1 pipelined on a second connection"
CLAIM = (
    "select id, claim, input from jobs.claim_v1(queues => array['bench'], worker_id => 'floor',"
    " batch_size => %s, visibility => interval '30 s', recover_lapsed => false)"
)
ACK = "select count(*) from jobs.ack_many_v1('floor', %s::uuid[], %s::bigint[])"
POLL = 0.25  # seconds: the pickup's fallback when a wake is missed


async def _noop(tally: Tally, row: tuple[Any, ...]) -> None:
    tally.on_start(row[2]["i"])
    tally.on_end(row[2]["i"])


async def _drain(url: str, tally: Tally) -> None:
    claims = await psycopg.AsyncConnection.connect(url, autocommit=True)
    acks = await psycopg.AsyncConnection.connect(url, autocommit=True)
    pending: asyncio.Future[Any] | None = None
    try:
        while not tally.done.is_set():
            rows = await (await claims.execute(CLAIM, (BATCH,))).fetchall()
            if pending is not None:
                await pending
                pending = None
            if not rows:
                await asyncio.sleep(0.01)  # the queue was filled before the clock started
                continue
            for row in rows:
                await _noop(tally, row)
            ids, tokens = [row[0] for row in rows], [row[1] for row in rows]
            pending = asyncio.ensure_future(acks.execute(ACK, (ids, tokens)))
        if pending is not None:
            await pending
    finally:
        await claims.close()
        await acks.close()


def work(url: str, count: int) -> None:
    tally = Tally(count)
    run_loop(_drain(url, tally))
    tally.emit_work(CONFIG)


async def _pick_up(url: str, tally: Tally) -> None:
    listener = await psycopg.AsyncConnection.connect(url, autocommit=True)
    claims = await psycopg.AsyncConnection.connect(url, autocommit=True)
    woken = asyncio.Event()

    async def hear() -> None:
        async for _notice in listener.notifies():
            woken.set()
            await asyncio.sleep(0)  # the claim goes first, as in the Worker's wake

    await listener.execute(f"listen {WAKE_CHANNEL}")
    hearing = asyncio.get_running_loop().create_task(hear())
    try:
        while not tally.done.is_set():
            rows = await (await claims.execute(CLAIM, (BATCH,))).fetchall()
            for row in rows:
                await _noop(tally, row)
            if rows:
                ids, tokens = [row[0] for row in rows], [row[1] for row in rows]
                await claims.execute(ACK, (ids, tokens))
            if len(rows) == BATCH:
                continue
            try:
                async with asyncio.timeout(POLL):
                    await woken.wait()
            except TimeoutError:
                pass
            woken.clear()
    finally:
        hearing.cancel()
        await asyncio.gather(hearing, return_exceptions=True)
        await listener.close()
        await claims.close()


def latency(url: str, count: int) -> None:
    tally = Tally(count, report_each=True)
    run_loop(_pick_up(url, tally))
    emit({"runs": tally.runs})


def _unsupported(*_: Any) -> None:
    raise SystemExit("durajobs-floor takes part in the burn-down, steady state and pickup only")


if __name__ == "__main__":
    main(
        Actions(
            durajobs_system.setup,
            durajobs_system.enqueue,
            work,
            latency,
            # the steady state's producer is durajobs' own: the floor is held to the same load
            durajobs_system.produce,
            _unsupported,
        ),
        __doc__,
    )
