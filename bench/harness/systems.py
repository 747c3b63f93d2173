"""The systems measured, how to run each one's command (bench/CONTRACT.md), and the SQL the
harness reads about each: how many jobs are not finished yet, and which schema holds its tables.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class System:
    name: str
    command: tuple[str, ...]
    # jobs enqueued and not finished (waiting or running): the steady state's depth
    depth_sql: str
    # the schema (or table name prefix) whose tables and indexes the health check sizes
    schema: str
    table_like: str = "%"
    # the measurements it takes part in (None: every one)
    measures: frozenset[str] | None = None

    def takes(self, measure: str) -> bool:
        return self.measures is None or measure in self.measures


def _python(script: str) -> tuple[str, ...]:
    return (sys.executable, str(BENCH / "systems" / script))


SYSTEMS: dict[str, System] = {
    "durajobs": System(
        "durajobs",
        _python("durajobs_system.py"),
        "select count(*) from jobs.jobs where state in ('ready', 'delayed', 'running')",
        "jobs",
    ),
    # the least a Python loop on durajobs' own functions costs: what the Worker is held against
    "durajobs-floor": System(
        "durajobs-floor",
        _python("durajobs_floor_system.py"),
        "select count(*) from jobs.jobs where state in ('ready', 'delayed', 'running')",
        "jobs",
        measures=frozenset({"burn", "steady", "latency"}),
    ),
    "pgqueuer": System(
        "pgqueuer",
        _python("pgqueuer_system.py"),
        "select count(*) from pgqueuer",
        "public",
        "pgqueuer%",
    ),
    "procrastinate": System(
        "procrastinate",
        _python("procrastinate_system.py"),
        "select count(*) from procrastinate_jobs where status in ('todo', 'doing')",
        "public",
        "procrastinate%",
    ),
    "graphile-worker": System(
        "graphile-worker",
        ("node", str(BENCH / "systems" / "graphile_system.mjs")),
        "select count(*) from graphile_worker._private_jobs",
        "graphile_worker",
    ),
}
