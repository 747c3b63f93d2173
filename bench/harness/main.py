"""Run every measurement for every system and write the markdown report.

    python -m harness.main [--systems durajobs,pgqueuer,...] [--reps 3] [--quick] [--out FILE]

Run through bench/run, which makes the throwaway server and points PG* at it.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from harness import measures, pg
from harness.report import render
from harness.systems import BENCH, SYSTEMS, System


@dataclass
class Plan:
    reps: int = 3
    single_jobs: int = 2_000
    bulk_jobs: int = 20_000
    burn_jobs: int = 20_000
    steady_seconds: float = 60.0
    latency_samples: int = 200
    idle_seconds: float = 60.0
    health_jobs: int = 1_000_000
    health_chunk: int = 100_000
    health_samples: int = 50
    horizon_jobs: int = 100_000
    horizon_chunk: int = 20_000
    horizon_samples: int = 50
    skip: set[str] = field(default_factory=set)


QUICK = Plan(
    reps=1,
    single_jobs=500,
    bulk_jobs=5_000,
    burn_jobs=5_000,
    steady_seconds=10.0,
    latency_samples=50,
    idle_seconds=20.0,
    health_jobs=50_000,
    health_chunk=25_000,
    health_samples=20,
    horizon_jobs=20_000,
    horizon_chunk=10_000,
    horizon_samples=20,
)


_FAILURES = (measures.SystemFailed, OSError, TimeoutError, psycopg.Error)


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _repeat(reps: int, what: str, measure: Callable[[], float]) -> list[float] | str:
    values: list[float] = []
    for rep in range(reps):
        try:
            values.append(measure())
        except _FAILURES as failure:
            _log(f"{what} failed: {failure}")
            return f"failed: {str(failure).splitlines()[0][:120]}"
        _log(f"{what} #{rep + 1}: {values[-1]:.2f}")
    return values


def _rounds(
    systems: list[System], reps: int, what: str, measure: Callable[[System], float]
) -> dict[str, list[float] | str]:
    """`measure` each system in turn, round after round (A, B, A, B, ...), not each system's
    repetitions in a block: the machine's pace drifts over a run (the same tree's burn-down
    moved 1.4x within an hour), and in rounds the drift reaches every system alike, so the
    ratios between them hold it out. A system that fails is left out of the rounds after."""
    results: dict[str, list[float] | str] = {system.name: [] for system in systems}
    for rep in range(reps):
        for system in systems:
            values = results[system.name]
            if isinstance(values, str):
                continue
            try:
                values.append(measure(system))
            except _FAILURES as failure:
                _log(f"{system.name} {what} failed: {failure}")
                results[system.name] = f"failed: {str(failure).splitlines()[0][:120]}"
                continue
            _log(f"{system.name} {what} #{rep + 1}: {values[-1]:.2f}")
    return results


def measure_in_rounds(systems: list[System], plan: Plan) -> dict[str, dict[str, Any]]:
    """The repeated measures (enqueue, burn-down, steady state, pickup), in rounds across the
    systems that take each."""
    by_system: dict[str, dict[str, Any]] = {system.name: {} for system in systems}

    def takers(key: str) -> list[System]:
        return [system for system in systems if key not in plan.skip and system.takes(key)]

    def record(key: str, results: dict[str, list[float] | str]) -> None:
        for name, values in results.items():
            by_system[name][key] = values

    def enqueue_single(system: System) -> float:
        return measures.enqueue_rate(system, "single", plan.single_jobs)

    def enqueue_bulk(system: System) -> float:
        return measures.enqueue_rate(system, "bulk", plan.bulk_jobs)

    enqueuers = takers("enqueue")
    record("enqueue_single", _rounds(enqueuers, plan.reps, "enqueue single", enqueue_single))
    record("enqueue_bulk", _rounds(enqueuers, plan.reps, "enqueue bulk", enqueue_bulk))
    burns: dict[str, list[measures.BurnDown]] = {}

    def burn(system: System) -> float:
        burned = measures.burn_down(system, plan.burn_jobs)  # a failure records nothing
        burns.setdefault(system.name, []).append(burned)
        return burned.jobs_per_second

    record("burn_down", _rounds(takers("burn"), plan.reps, "burn-down", burn))
    for name, burned in burns.items():
        by_system[name]["peak_rss_mb"] = [b.peak_rss_kb / 1024 for b in burned]
        by_system[name]["config"] = burned[-1].config
    # the steady state runs at 80 % of each system's own burn-down
    rates = {
        system.name: 0.8 * statistics.median(by_system[system.name]["burn_down"])
        for system in takers("steady")
        if isinstance(by_system[system.name].get("burn_down"), list)
    }
    steadies: dict[str, list[measures.Steady]] = {}

    def steady(system: System) -> float:
        held = measures.steady_state(system, rates[system.name], plan.steady_seconds)
        steadies.setdefault(system.name, []).append(held)
        return held.jobs_per_second

    steady_systems = [system for system in takers("steady") if system.name in rates]
    record("steady", _rounds(steady_systems, plan.reps, "steady at 80 % of its burn-down", steady))
    for name, held in steadies.items():
        by_system[name]["steady_depth"] = held[-1].depth
        by_system[name]["steady_rate"] = rates[name]
    samples: dict[str, list[list[float]]] = {}

    def latency(system: System) -> float:
        taken = measures.pickup_latency(system, plan.latency_samples)
        samples.setdefault(system.name, []).append(taken)
        return statistics.median(taken)

    record("latency_p50", _rounds(takers("latency"), plan.reps, "pickup p50 ms", latency))
    for name, taken in samples.items():
        by_system[name]["latency_p95"] = [measures.percentile(s, 0.95) for s in taken]
        by_system[name]["latency_p99"] = [measures.percentile(s, 0.99) for s in taken]
    return by_system


def measure_once(system: System, plan: Plan) -> dict[str, Any]:
    """The measures made once a system, one system after another: idle, health, horizon."""
    results: dict[str, Any] = {}
    name = system.name

    def wanted(key: str) -> bool:
        return key not in plan.skip and system.takes(key)

    if wanted("idle"):
        results["idle"] = _repeat(
            1,
            f"{name} idle statements/min",
            lambda: measures.idle_statements_per_minute(system, plan.idle_seconds),
        )
    if wanted("health"):
        try:
            health = measures.table_health(
                system, plan.health_jobs, plan.health_chunk, plan.health_samples
            )
            results["health"] = health
            _log(f"{name} health: {health}")
        except _FAILURES as failure:
            results["health"] = f"failed: {str(failure).splitlines()[0][:120]}"
    if wanted("horizon"):
        try:
            horizons = [
                measures.held_horizon(
                    system, plan.horizon_jobs, plan.horizon_chunk, plan.horizon_samples, held=held
                )
                for held in (False, True)
            ]
            results["horizon"] = horizons
            _log(f"{name} horizon: {horizons}")
        except _FAILURES as failure:
            results["horizon"] = f"failed: {str(failure).splitlines()[0][:120]}"
    return results


def ceiling(plan: Plan) -> list[float] | str:
    sys.path.insert(0, str(BENCH))
    from ceiling.run_ceiling import run_ceiling  # type: ignore[import-not-found]

    def once() -> float:
        url = pg.fresh_database("bench_ceiling")
        return float(run_ceiling(url)["rows_per_second"])

    return _repeat(plan.reps, "ceiling rows/s", once)


def fanout(plan: Plan) -> str:
    """bench/fanout.py's table: 1 parent and 1,000 children, against the same children alone."""
    url = pg.fresh_database("bench_fanout")
    _log("durajobs fan-out")
    answer = subprocess.run(
        [sys.executable, str(BENCH / "fanout.py"), "--database-url", url, "--reps", str(plan.reps)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if answer.returncode != 0:
        return f"# Fan-out and fan-in\n\nfailed: {answer.stderr.strip().splitlines()[-1:]}\n"
    return answer.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--reps", type=int)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument(
        "--skip",
        default="",
        help="comma list of: enqueue,burn,steady,latency,idle,health,horizon,ceiling,fanout",
    )
    parser.add_argument("--health-jobs", type=int)
    parser.add_argument(
        "--soak",
        action="store_true",
        help="only the soak: --soak-jobs offered to one durajobs worker at --soak-rate a second,"
        " sampled every 10 s (writes results/soak.md unless --out says otherwise)",
    )
    parser.add_argument("--soak-jobs", type=int, default=1_000_000)
    parser.add_argument("--soak-rate", type=float, default=4_000.0)
    parser.add_argument("--out", default=str(BENCH / "results" / "latest.md"))
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    if args.reps:
        plan.reps = args.reps
    if args.health_jobs:
        plan.health_jobs = args.health_jobs
        plan.health_chunk = min(plan.health_chunk, args.health_jobs)
    plan.skip = {s for s in args.skip.split(",") if s}
    if args.soak:
        return _soak(args)

    started = time.time()
    systems = [SYSTEMS[name] for name in args.systems.split(",") if name]
    by_system = measure_in_rounds(systems, plan)
    for system in systems:
        by_system[system.name].update(measure_once(system, plan))
    limit = ceiling(plan) if "ceiling" not in plan.skip else "skipped"
    fan = fanout(plan) if "fanout" not in plan.skip and "durajobs" in by_system else None
    machine = {
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {_cpus()} CPUs",
        "postgres": pg.settings(),
        "minutes": f"{(time.time() - started) / 60:.1f}",
    }
    text = render(by_system, limit, machine, dict(plan.__dict__))
    if fan is not None:
        # durajobs alone: the peers have no child runs to wait for
        text += "\n" + fan.replace("# Fan-out", "## Fan-out", 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


def _soak(args: argparse.Namespace) -> int:
    from harness.report import render_soak

    _log(f"soak: {args.soak_jobs:,} jobs at {args.soak_rate:,.0f}/s")
    result = measures.soak(SYSTEMS["durajobs"], args.soak_jobs, args.soak_rate)
    machine = {
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {_cpus()} CPUs",
        "postgres": pg.settings(),
    }
    text = render_soak(result, machine)
    out = Path(args.out)
    if out.name == "latest.md":
        out = out.with_name("soak.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
