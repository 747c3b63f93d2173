"""A held xmin horizon against the claim: rounds of jobs enqueued and drained by durajobs' own
claim and ack (batches of 500, one session), first with nothing holding the horizon, then again
on a fresh schema while another session keeps one repeatable-read snapshot open throughout (a
long report, or a session left idle in transaction). No vacuum may remove what the drained jobs
leave behind the snapshot, so each claim may walk more of it.

Per round: the burn-down (jobs/s), and an empty claim's latency (nothing due) over 2.5 s of
back-to-back claims: the median, and the slowest, which is a once-a-second read from the head
of the index (jobs._claim_rescan).

    bench/horizon.py --database-url URL [--rounds 5] [--jobs 20000]
        (drops and re-creates the schema `jobs` there)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import psycopg
from drain_loop import drain, enqueue, fresh_schema

BATCH = 500
CLAIM = (
    "select id, claim from jobs.claim_v1(queues => array['bench'], worker_id => 'w1',"
    " batch_size => %s, visibility => interval '30 s', recover_lapsed => false)"
)


def _empty_claims_ms(connection: psycopg.Connection[Any]) -> tuple[float, float]:
    times = []
    until = time.perf_counter() + 2.5
    while time.perf_counter() < until:
        started = time.perf_counter()
        connection.execute(CLAIM, [BATCH]).fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def run(url: str, rounds: int, jobs: int, held: bool) -> list[tuple[float, float, float]]:
    fresh_schema(url)
    holder = psycopg.connect(url)
    try:
        if held:
            holder.execute("set transaction isolation level repeatable read")
            holder.execute("select count(*) from pg_class")  # the snapshot is taken here
        results = []
        with psycopg.connect(url, autocommit=True) as connection:
            for round_ in range(rounds):
                enqueue(connection, str(round_), jobs)
                started = time.perf_counter()
                drained = drain(connection, CLAIM, BATCH)
                rate = drained / (time.perf_counter() - started)
                results.append((rate, *_empty_claims_ms(connection)))
        return results
    finally:
        holder.close()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args(argv)
    free = run(args.database_url, args.rounds, args.jobs, held=False)
    held = run(args.database_url, args.rounds, args.jobs, held=True)
    print(
        "| round | jobs behind | burn-down free jobs/s | held | held / free"
        " | empty claim free p50 / max ms | held p50 / max ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, (free_round, held_round) in enumerate(zip(free, held, strict=True)):
        free_rate, free_p50, free_max = free_round
        held_rate, held_p50, held_max = held_round
        print(
            f"| {n + 1} | {n * args.jobs:,} | {free_rate:,.0f} | {held_rate:,.0f}"
            f" | {held_rate / free_rate:.2f}x | {free_p50:.2f} / {free_max:.1f}"
            f" | {held_p50:.2f} / {held_max:.1f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
