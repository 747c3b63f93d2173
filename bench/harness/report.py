"""The markdown report: one table, each figure as median (min-max) over the repetitions, and
durajobs' ratio to each peer and to the raw-SQL ceiling."""

from __future__ import annotations

import statistics
from typing import Any

from harness.measures import Health

# (result key, label, unit, higher is better)
ROWS: list[tuple[str, str, str, bool]] = [
    ("enqueue_single", "enqueue, one job per call", "jobs/s", True),
    ("enqueue_bulk", "enqueue, bulk API", "jobs/s", True),
    ("burn_down", "burn-down of queued no-op jobs", "jobs/s", True),
    ("steady", "steady state at 80 % of burn-down", "jobs/s", True),
    ("latency_p50", "pickup latency p50", "ms", False),
    ("latency_p95", "pickup latency p95", "ms", False),
    ("latency_p99", "pickup latency p99", "ms", False),
    ("idle", "idle cost", "statements/min", False),
    ("peak_rss_mb", "worker peak RSS in burn-down", "MB", False),
]


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if not value:
        return "-"
    middle = statistics.median(value)
    if len(value) == 1:
        return _number(middle)
    return f"{_number(middle)} ({_number(min(value))}-{_number(max(value))})"


def _number(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _ratio(ours: Any, theirs: Any) -> str:
    if not isinstance(ours, list) or not isinstance(theirs, list) or not ours or not theirs:
        return "-"
    bottom = statistics.median(theirs)
    if bottom == 0:
        return "-"
    return f"{statistics.median(ours) / bottom:.2f}x"


def render(
    by_system: dict[str, dict[str, Any]],
    ceiling: list[float] | str,
    machine: dict[str, Any],
    plan: dict[str, Any],
) -> str:
    names = list(by_system)
    peers = [n for n in names if n != "durajobs"]
    header = ["measure", "unit", *names]
    if "durajobs" in by_system:
        header += [f"durajobs / {peer}" for peer in peers]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label, unit, _higher in ROWS:
        cells = [label, unit, *(_cell(by_system[n].get(key)) for n in names)]
        if "durajobs" in by_system:
            cells += [_ratio(by_system["durajobs"].get(key), by_system[p].get(key)) for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    ceiling_cells = ["raw-SQL ceiling (pgbench, claim 100 + complete)", "rows/s", _cell(ceiling)]
    lines.append("| " + " | ".join(ceiling_cells + [""] * (len(header) - 3)) + " |")
    parts = ["# Benchmark", "", *lines, ""]
    if "durajobs" in by_system and isinstance(ceiling, list):
        burn = by_system["durajobs"].get("burn_down")
        parts.append(f"durajobs burn-down / ceiling: {_ratio(burn, ceiling)}")
        parts.append("")
    parts += ["## Table health after many jobs", ""]
    parts.append(
        "| system | jobs | table MB | index MB | dead tuples | pickup p50 at start ms"
        " | after ms | after / start |"
    )
    parts.append("|---|---|---|---|---|---|---|---|")
    for name in names:
        health = by_system[name].get("health")
        if isinstance(health, Health):
            parts.append(
                f"| {name} | {health.jobs:,} | {health.table_bytes / 2**20:.1f} | "
                f"{health.index_bytes / 2**20:.1f} | {health.dead_tuples:,} | "
                f"{health.latency_p50_start_ms:.2f} | {health.latency_p50_after_ms:.2f} | "
                f"{health.latency_p50_after_ms / max(health.latency_p50_start_ms, 1e-9):.2f}x |"
            )
        elif health is not None:
            parts.append(f"| {name} | {health} |  |  |  |  |  |  |")
    parts += ["", "## Steady state: queue depth, sampled each second", ""]
    for name in names:
        depth = by_system[name].get("steady_depth")
        rate = by_system[name].get("steady_rate")
        if depth:
            parts.append(f"- {name} at {rate:,.0f} jobs/s offered: {depth}")
    parts += ["", "## Configurations", ""]
    for name in names:
        parts.append(f"- {name}: {by_system[name].get('config', '-')}")
    parts += ["", "## Machine and server", ""]
    for key, value in machine.items():
        parts.append(f"- {key}: {value}")
    parts.append(f"- plan: {plan}")
    return "\n".join(parts) + "\n"
