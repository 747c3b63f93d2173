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


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _repeat(reps: int, what: str, measure: Callable[[], float]) -> list[float] | str:
    values: list[float] = []
    for rep in range(reps):
        try:
            values.append(measure())
        except (measures.SystemFailed, OSError, TimeoutError, psycopg.Error) as failure:
            _log(f"{what} failed: {failure}")
            return f"failed: {str(failure).splitlines()[0][:120]}"
        _log(f"{what} #{rep + 1}: {values[-1]:.2f}")
    return values


def measure_system(system: System, plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {}
    name = system.name

    def wanted(key: str) -> bool:
        return key not in plan.skip and system.takes(key)

    if wanted("enqueue"):
        results["enqueue_single"] = _repeat(
            plan.reps,
            f"{name} enqueue single",
            lambda: measures.enqueue_rate(system, "single", plan.single_jobs),
        )
        results["enqueue_bulk"] = _repeat(
            plan.reps,
            f"{name} enqueue bulk",
            lambda: measures.enqueue_rate(system, "bulk", plan.bulk_jobs),
        )
    burns: list[measures.BurnDown] = []
    if wanted("burn"):

        def burn() -> float:
            burns.append(measures.burn_down(system, plan.burn_jobs))
            return burns[-1].jobs_per_second

        results["burn_down"] = _repeat(plan.reps, f"{name} burn-down", burn)
        if burns:
            results["peak_rss_mb"] = [b.peak_rss_kb / 1024 for b in burns]
            results["config"] = burns[-1].config
    if wanted("steady") and isinstance(results.get("burn_down"), list):
        rate = 0.8 * statistics.median(results["burn_down"])
        steadies: list[measures.Steady] = []

        def steady() -> float:
            steadies.append(measures.steady_state(system, rate, plan.steady_seconds))
            return steadies[-1].jobs_per_second

        results["steady"] = _repeat(plan.reps, f"{name} steady at {rate:.0f}/s", steady)
        if steadies:
            results["steady_depth"] = steadies[-1].depth
            results["steady_rate"] = rate
    if wanted("latency"):
        samples: list[list[float]] = []

        def latency() -> float:
            samples.append(measures.pickup_latency(system, plan.latency_samples))
            return statistics.median(samples[-1])

        results["latency_p50"] = _repeat(plan.reps, f"{name} pickup p50 ms", latency)
        if samples:
            results["latency_p95"] = [measures.percentile(s, 0.95) for s in samples]
            results["latency_p99"] = [measures.percentile(s, 0.99) for s in samples]
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
        except (measures.SystemFailed, OSError, TimeoutError, psycopg.Error) as failure:
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
        except (measures.SystemFailed, OSError, TimeoutError, psycopg.Error) as failure:
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
    by_system: dict[str, dict[str, Any]] = {}
    for name in [s for s in args.systems.split(",") if s]:
        _log(f"measuring {name}")
        by_system[name] = measure_system(SYSTEMS[name], plan)
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
