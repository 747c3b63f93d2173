"""What the fault tests share: real worker, relay and scheduler processes with their output kept
in files, waiting with a reason, and the effects table every test counts in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import psycopg

HERE = Path(__file__).resolve().parent
APP = "fault_jobs:registry"

EFFECTS_TABLE = (
    "create table effects (token uuid primary key, run_id text not null, what text not null,"
    " attempt int not null, pid int not null, at timestamptz not null default clock_timestamp())"
)


class Process:
    """A durajobs command in a child process; its output goes to a file a failure can show.

    Every one started is listed in `Process.started` until a test's teardown kills what is left
    (conftest.py), so a failing test leaves no worker or relay running behind it."""

    started: ClassVar[list[Process]] = []

    def __init__(self, arguments: Sequence[str], database_url: str, log: Path) -> None:
        Process.started.append(self)
        self.log = log
        self._out = log.open("w")
        environment = {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "durajobs.cli", *arguments],
            cwd=HERE,
            env=environment,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, number: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, number)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._out.close()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: answer the exit status."""
        self.signal(signal.SIGCONT)  # a stopped process cannot drain
        self.signal(signal.SIGTERM)
        try:
            status = self.popen.wait(timeout=timeout)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
            self._out.close()
        return status

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return f"--- {self.log.name} (pid {self.pid}) ---\n" + "\n".join(text[-lines:])


def worker(
    database_url: str, log: Path, *, visibility: float = 2, in_flight: int = 8, **more: str
) -> Process:
    arguments = [
        "worker",
        "--app",
        APP,
        "--visibility",
        str(visibility),
        "--max-in-flight",
        str(in_flight),
        "--no-purge",
    ]
    for option, value in more.items():
        arguments += [f"--{option.replace('_', '-')}", value]
    return Process(arguments, database_url, log)


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    show: Sequence[Process] = (),
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            shown = "\n".join(process.tail() for process in show)
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{shown}")
        time.sleep(0.05)


def query(database_url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as connection:
        return connection.execute(sql, params).fetchall()


def value(database_url: str, sql: str, params: Sequence[Any] = ()) -> Any:
    return query(database_url, sql, params)[0][0]


def unfinished(database_url: str) -> int:
    return int(value(database_url, "select count(*) from jobs.jobs where state <> 'done'"))


def now(database_url: str) -> Any:
    return value(database_url, "select clock_timestamp()")


def enqueue(database_url: str, name: str, keys: Sequence[str], ms: int = 0) -> None:
    """One committed jobs.enqueue_many call per 1,000 jobs, from SQL as any client would."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        for start in range(0, len(keys), 1000):
            rows = [
                {"name": name, "input": {"key": key, "ms": ms}, "idempotency_key": key}
                for key in keys[start : start + 1000]
            ]
            connection.execute(
                "select count(*) from jobs.enqueue_many(%s::jsonb)",
                [psycopg.types.json.Jsonb(rows)],
            )


def duplicates_after(database_url: str, what: str, after: Any) -> list[tuple[Any, ...]]:
    """Every effect `what` of a run that had already had it, written after `after`."""
    return query(
        database_url,
        "select run_id, at, attempt, pid from ("
        "  select run_id, at, attempt, pid,"
        "         row_number() over (partition by run_id order by at) as nth"
        "    from effects where what = %s) e"
        " where nth > 1 and at > %s order by at",
        [what, after],
    )


def terminate_backends(database_url: str, database: str) -> int:
    """pg_terminate_backend every session of `database` but this one: answer how many."""
    return int(
        value(
            database_url,
            "select count(pg_terminate_backend(pid)) from pg_stat_activity"
            " where datname = %s and pid <> pg_backend_pid()",
            [database],
        )
    )
