"""The raw-SQL ceiling: how many rows per second Postgres itself can claim and complete.

Loads a plain table of ready rows, then runs ``claim.sql`` under pgbench: every script execution
claims 100 rows with ``FOR UPDATE SKIP LOCKED`` in one transaction and marks them done in a
second. No queue system is involved, so the figure bounds what any Postgres queue can reach on
the same server. See README.md.

    bench/.venv/bin/python bench/ceiling/run_ceiling.py --database-url URL [--rows R]
        [--clients C] [--seconds T] [--pgbench PATH] [--keep-table]

Prints one JSON object: {"rows_per_second": x, "clients": C, "seconds": T, "tps": t}.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import psycopg

CLAIM_SCRIPT = Path(__file__).with_name("claim.sql")
# Rows per script execution: the `limit 100` in claim.sql.
ROWS_PER_EXECUTION = 100

DEFAULT_ROWS = 2_000_000
# Best of 2, 4 and 8 clients on the 2-core benchmark machine (README.md).
DEFAULT_CLIENTS = 4
DEFAULT_SECONDS = 10

# pgbench 14+ prints "tps = N (without initial connection time)"; 13 and older printed
# "tps = N (excluding connections establishing)".
TPS_LINE = re.compile(
    r"^tps = ([0-9.]+) \((?:without initial connection time|excluding connections establishing)\)",
    re.MULTILINE,
)

SCHEMA = (
    "drop table if exists ceiling_jobs",
    "create table ceiling_jobs ("
    " id bigserial primary key, state text not null, owner int, payload jsonb)",
)
LOAD = (
    "insert into ceiling_jobs (state, payload)"
    " select 'ready', jsonb_build_object('i', g) from generate_series(1, %s) g"
)
INDEX = "create index ceiling_jobs_ready on ceiling_jobs (id) where state = 'ready'"


class CeilingResult(TypedDict):
    rows_per_second: float
    clients: int
    seconds: int
    tps: float


def find_pgbench() -> str:
    """pgbench from PATH, else the newest one under /usr/lib/postgresql/*/bin."""
    found = shutil.which("pgbench")
    if found:
        return found
    installed = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pgbench"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not installed:
        raise FileNotFoundError("pgbench not found on PATH or under /usr/lib/postgresql")
    return installed[-1]


def parse_tps(output: str) -> float:
    """The tps figure from pgbench's summary (one "transaction" = one script execution)."""
    match = TPS_LINE.search(output)
    if match is None:
        raise ValueError(f"no tps line in pgbench output:\n{output}")
    return float(match.group(1))


def prepare_table(conn: psycopg.Connection[tuple[object, ...]], rows: int) -> None:
    """(Re)create ceiling_jobs with `rows` ready rows, indexed, vacuumed and analyzed."""
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute(LOAD, (rows,))
    conn.execute(INDEX)
    conn.execute("vacuum analyze ceiling_jobs")
    try:
        # Flush the load's WAL now so that no checkpoint it would trigger lands in the run.
        conn.execute("checkpoint")
    except psycopg.errors.InsufficientPrivilege:
        print("run_ceiling: no privilege to checkpoint; continuing", file=sys.stderr)


def run_ceiling(
    database_url: str,
    *,
    rows: int = DEFAULT_ROWS,
    clients: int = DEFAULT_CLIENTS,
    seconds: int = DEFAULT_SECONDS,
    pgbench: str | None = None,
    keep_table: bool = False,
) -> CeilingResult:
    """Load `rows` rows, run claim.sql with `clients` clients for `seconds` s, report rows/s.

    rows/s = tps * 100: pgbench's tps counts executions of the whole script, each of which
    claims (first transaction) and completes (second transaction) 100 rows. Raises if the table
    ran out of ready rows, since the last executions would then have claimed fewer than 100.
    """
    if rows < 1 or clients < 1 or seconds < 1:
        raise ValueError("rows, clients and seconds must be positive")
    with psycopg.connect(database_url, autocommit=True) as conn:
        prepare_table(conn, rows)
        command = [
            pgbench or find_pgbench(),
            "-n",  # no vacuum of the pgbench_* tables, which do not exist here
            "-f",
            str(CLAIM_SCRIPT),
            "-c",
            str(clients),
            "-j",
            str(clients),
            "-T",
            str(seconds),
            database_url,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench exited {done.returncode}:\n{done.stderr}{done.stdout}")
        tps = parse_tps(done.stdout)

        row = conn.execute(
            "select count(*) filter (where state = 'ready'),"
            " count(*) filter (where state = 'running'),"
            " count(*) filter (where state = 'done')"
            " from ceiling_jobs"
        ).fetchone()
        assert row is not None
        ready, running, finished = (int(v) for v in row)
        print(
            f"run_ceiling: ready={ready} running={running} done={finished}"
            f" (done/seconds = {finished / seconds:.0f} rows/s; the tps figure excludes"
            " connection time)",
            file=sys.stderr,
        )
        if not keep_table:
            conn.execute("drop table ceiling_jobs")
    if ready == 0:
        raise RuntimeError(f"ceiling_jobs ran out of ready rows; raise rows above {rows}")
    return CeilingResult(
        rows_per_second=tps * ROWS_PER_EXECUTION,
        clients=clients,
        seconds=seconds,
        tps=tps,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    parser.add_argument("--seconds", type=int, default=DEFAULT_SECONDS)
    parser.add_argument("--pgbench", help="path to pgbench (default: PATH, then /usr/lib)")
    parser.add_argument("--keep-table", action="store_true", help="leave ceiling_jobs behind")
    args = parser.parse_args(argv)
    result = run_ceiling(
        args.database_url,
        rows=args.rows,
        clients=args.clients,
        seconds=args.seconds,
        pgbench=args.pgbench,
        keep_table=args.keep_table,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
