"""What a job costs in CPU, the server's and the system's own process's, system by system:
bench/results/cpu-per-job-2026-12-04.md.

    bench/.venv/bin/python bench/cpu_per_job.py postgresql://postgres@localhost:5432/postgres

For each system (its command in systems/, as bench/CONTRACT.md runs it) and each round, on a
fresh database next to the one named (dropped after): the bulk enqueue of JOBS jobs, then ONE
worker's burn-down of them, each measured apart. The server's CPU is read off /proc: what the
postmaster reaped of its exited backends, plus what its live children used, before and after
(so the server must run on this machine, and nothing else should use it meanwhile). The
process's CPU is its own user and system time, less what the same command costs to start and
stop on one job. Reports medians of ROUNDS, in us a job.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BENCH = Path(__file__).resolve().parent
JOBS = 100_000
ROUNDS = 2
COMMANDS = {
    "durajobs": [sys.executable, str(BENCH / "systems" / "durajobs_system.py")],
    "durajobs-floor": [sys.executable, str(BENCH / "systems" / "durajobs_floor_system.py")],
    "pgqueuer": [sys.executable, str(BENCH / "systems" / "pgqueuer_system.py")],
    "graphile-worker": ["node", str(BENCH / "systems" / "graphile_system.mjs")],
}
TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: [0] is the state, [1] the ppid."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _server_seconds(postmaster: int) -> float:
    """CPU seconds the server has used: the postmaster's reaped children and its own, plus
    its live children's."""
    own = _stat(postmaster)
    ticks = sum(int(own[field]) for field in (11, 12, 13, 14))  # utime stime cutime cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat(int(entry))
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / TICKS


def _timed(command: list[str]) -> tuple[dict[str, object], float]:
    """Run a system's command; answer its last line and its process's CPU seconds."""
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%U %S", *command], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{command[1:3]} failed:\n{done.stderr[-2000:]}")
    user, system = map(float, done.stderr.strip().splitlines()[-1].split())
    return json.loads(done.stdout.strip().splitlines()[-1]), user + system


def _round(admin: str, postmaster: int, name: str) -> dict[str, float]:
    database = f"cpu_per_job_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"create database {database}")
    # a URL: Graphile Worker's pool takes no keyword form
    url = "postgresql://{user}@{host}:{port}/{dbname}".format(
        **{"port": 5432, **conninfo_to_dict(make_conninfo(admin, dbname=database))}
    )
    base = [*COMMANDS[name]]
    try:
        _timed([*base, "setup", "--database-url", url])
        # what starting and stopping costs each command, on one job: taken off its figure
        _, enqueue_start = _timed([*base, "enqueue", "--count", "1", "--mode", "bulk",
                                   "--start", str(JOBS + 1), "--database-url", url])  # fmt: skip
        _, work_start = _timed([*base, "work", "--count", "1", "--database-url", url])
        measured: dict[str, float] = {}
        for action in ("enqueue", "work"):
            before = _server_seconds(postmaster)
            if action == "enqueue":
                _, process = _timed([*base, "enqueue", "--count", str(JOBS), "--mode", "bulk",
                                     "--start", "0", "--database-url", url])  # fmt: skip
                process -= enqueue_start
            else:
                ran, process = _timed([*base, "work", "--count", str(JOBS), "--database-url", url])
                if (ran["runs"], ran["unique"]) != (JOBS, JOBS):
                    raise SystemExit(f"{name}: ran {ran['runs']}, unique {ran['unique']}")
                process -= work_start
                spent = float(ran["last_end"]) - float(ran["first_start"])  # type: ignore[arg-type]
                measured["jobs/s"] = JOBS / spent
            time.sleep(1.5)  # the backends end and the postmaster reaps them
            measured[f"{action} server"] = (_server_seconds(postmaster) - before) / JOBS * 1e6
            measured[f"{action} process"] = process / JOBS * 1e6
        return measured
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"drop database if exists {database} with (force)")


def main() -> None:
    admin = sys.argv[1]
    systems = sys.argv[2].split(",") if len(sys.argv) > 2 else list(COMMANDS)
    with psycopg.connect(admin) as connection:
        backend = connection.execute("select pg_backend_pid()").fetchone()
        assert backend is not None
        postmaster = int(_stat(backend[0])[1])
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    for _ in range(ROUNDS):
        for name in systems:  # in turn, so the machine's drift reaches every system alike
            rounds[name].append(_round(admin, postmaster, name))
    columns = ["jobs/s", "work server", "work process", "enqueue server", "enqueue process"]
    print("| system | burn-down jobs/s | burn-down: server us a job | its process | "
          "bulk enqueue: server us a job | its process |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, measured in rounds.items():
        cells = [statistics.median(one[column] for one in measured) for column in columns]
        print(f"| {name} | {cells[0]:,.0f} | " + " | ".join(f"{c:.1f}" for c in cells[1:]) + " |")


if __name__ == "__main__":
    main()
