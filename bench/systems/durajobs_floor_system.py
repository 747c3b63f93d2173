"""The floor under the durajobs worker, measured as a system (bench/CONTRACT.md): the burn-down,
and the steady state beside durajobs' own producer.

The loop of ../shared/probe/pyceiling.py's dj-pipe mode on durajobs' own functions: claim a
batch with jobs.claim_v1 (no lapsed recovery), await one no-op `async def` per row, ack the
batch with jobs.ack_many_v1 on a second connection while the next claim is sent. No leases kept,
no steps, no fencing beyond the SQL's: what one job costs in SQL and the least Python can do. The
report's "durajobs / durajobs-floor" is how close the Worker comes to it.

Run as `python bench/systems/durajobs_floor_system.py <action> --database-url URL [options]`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import durajobs_system
import psycopg
from contract import Actions, Tally, main

from durajobs.runtime.loop import run as run_loop

BATCH = 500
CONFIG = f"claim_v1 batch {BATCH} + ack_many_v1 pipelined on a second connection"
CLAIM = (
    "select id, claim, input from jobs.claim_v1(queues => array['bench'], worker_id => 'floor',"
    " batch_size => %s, visibility => interval '30 s', recover_lapsed => false)"
)
ACK = "select count(*) from jobs.ack_many_v1('floor', %s::uuid[], %s::bigint[])"


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


def _unsupported(*_: Any) -> None:
    raise SystemExit("durajobs-floor takes part in the burn-down and the steady state only")


if __name__ == "__main__":
    main(
        Actions(
            durajobs_system.setup,
            durajobs_system.enqueue,
            work,
            _unsupported,
            # the steady state's producer is durajobs' own: the floor is held to the same load
            durajobs_system.produce,
            _unsupported,
        ),
        __doc__,
    )
