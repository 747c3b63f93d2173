"""The markdown report: one table, each figure as median (min-max) over the repetitions, and
durajobs' ratio to each peer and to the raw-SQL ceiling."""

from __future__ import annotations

import statistics
from typing import Any

from harness.measures import Health, Horizon, Soak

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
    parts += ["", "## A held xmin horizon", ""]
    parts.append(
        "Chunks of jobs burned down one after another, with nothing holding the horizon (free)"
        " and with one repeatable-read snapshot open throughout (held); the last chunk runs"
        " behind every job before it."
    )
    parts.append("")
    parts.append(
        "| system | jobs | last chunk free jobs/s | held | held / free"
        " | pickup p50 after, free ms | held ms |"
    )
    parts.append("|---|---|---|---|---|---|---|")
    for name in names:
        horizon = by_system[name].get("horizon")
        if isinstance(horizon, list) and all(isinstance(h, Horizon) for h in horizon):
            free, held = horizon
            jobs = sum(1 for _ in free.chunk_rates) * plan.get("horizon_chunk", 0)
            parts.append(
                f"| {name} | {jobs:,} | {free.chunk_rates[-1]:,.0f} | {held.chunk_rates[-1]:,.0f}"
                f" | {held.chunk_rates[-1] / free.chunk_rates[-1]:.2f}x"
                f" | {free.latency_p50_after_ms:.2f} | {held.latency_p50_after_ms:.2f} |"
            )
        elif horizon is not None:
            parts.append(f"| {name} | {horizon} |  |  |  |  |  |")
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


def _drift(first: list[float], last: list[float]) -> str:
    if not first or not last or statistics.mean(first) == 0:
        return "-"
    return f"{statistics.mean(last) / statistics.mean(first):.2f}x"


def render_soak(soak: Soak, machine: dict[str, Any]) -> str:
    """The soak's samples, and how the last quarter compares with the first."""
    parts = [
        "# Soak",
        "",
        f"{soak.total:,} jobs offered to one durajobs worker at {soak.rate:,.0f} a second"
        f" (enqueued: {soak.enqueued:,}), while it drained them; sampled every 10 s.",
        "",
        "Sizes: `jobs.jobs_live` (live: the waiting and running rows, what the claim reads), and"
        " every table of the schema with the history of done jobs, which grows by design until"
        " `jobs.purge` drops it.",
        "",
        "| s | done | jobs/s | wait p50 ms | wait p99 ms | backlog | live table MB"
        " | live index MB | all tables MB | all indexes MB | dead tuples |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in soak.samples:
        p50 = "-" if x.wait_p50_ms is None else f"{x.wait_p50_ms:.1f}"
        p99 = "-" if x.wait_p99_ms is None else f"{x.wait_p99_ms:.1f}"
        parts.append(
            f"| {x.seconds:.0f} | {x.done:,} | {x.jobs_per_second:,.0f} | {p50} | {p99}"
            f" | {x.depth:,} | {x.live_table_bytes / 2**20:.1f}"
            f" | {x.live_index_bytes / 2**20:.1f} | {x.table_bytes / 2**20:.1f}"
            f" | {x.index_bytes / 2**20:.1f} | {x.dead_tuples:,} |"
        )
    # the steady part: the samples while jobs were still offered, past the first
    offered = [x for x in soak.samples if x.seconds <= soak.total / soak.rate][1:]
    quarter = max(1, len(offered) // 4)
    first, last = offered[:quarter], offered[-quarter:]

    def values(rows: list[Any], key: str) -> list[float]:
        return [float(getattr(r, key)) for r in rows if getattr(r, key) is not None]

    parts += ["", "## Last quarter against the first (while jobs were offered)", ""]
    parts.append("| measure | first quarter | last quarter | last / first |")
    parts.append("|---|---|---|---|")
    for key, label in (
        ("jobs_per_second", "throughput, jobs/s"),
        ("wait_p50_ms", "wait p50, ms"),
        ("wait_p99_ms", "wait p99, ms"),
        ("depth", "backlog, jobs"),
        ("live_table_bytes", "live table bytes"),
        ("live_index_bytes", "live index bytes"),
        ("index_bytes", "all index bytes"),
        ("dead_tuples", "dead tuples"),
    ):
        a, b = values(first, key), values(last, key)
        mean_a = f"{statistics.mean(a):,.1f}" if a else "-"
        mean_b = f"{statistics.mean(b):,.1f}" if b else "-"
        parts.append(f"| {label} | {mean_a} | {mean_b} | {_drift(a, b)} |")
    parts += ["", "## Machine and server", ""]
    for key, value in machine.items():
        parts.append(f"- {key}: {value}")
    return "\n".join(parts) + "\n"
