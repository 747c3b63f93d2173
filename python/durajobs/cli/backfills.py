"""`durajobs backfill list|pending|run`: the backfills as a deploy gate.

`list` prints the one projection (services.backfills); `pending` exits 1 with X_BACKFILL_PENDING
while any declared backfill is unswept here (not run, failed, or its pass still on its way), for
a deploy pipeline; `run` checks a backfill can
run (declared, allowed in this environment, its required migration applied, not completed, not
live) and, only with --write, enqueues its pass: a dry run is the default, and a backfill never
runs inline in the command.
"""

from __future__ import annotations

import argparse

from durajobs.cli.operator import Run, Subcommands, WithDatabase
from durajobs.cli.support import database_url, load_registry
from durajobs.client import Client
from durajobs.declare.backfill import ENVIRONMENT_VARIABLE, Backfill, current_environment
from durajobs.declare.registry import Registry
from durajobs.display import render
from durajobs.errors import (
    BackfillApplied,
    BackfillEnvironment,
    BackfillMigrationPending,
    BackfillPending,
    BackfillRunning,
    BackfillUnknown,
    DurajobsError,
)
from durajobs.services.backfills import (
    BackfillReport,
    BackfillStatus,
    migration_applied,
    read_report,
)


def _environment(args: argparse.Namespace) -> str:
    return args.environment or current_environment()


def _report(client: Client, registry: Registry, environment: str) -> BackfillReport:
    return read_report(client.run, registry.backfills(), environment)


def _cmd_list(args: argparse.Namespace) -> int:
    registry = load_registry(args.app)
    with Client.connect(database_url(args.database_url)) as client:
        report = _report(client, registry, _environment(args))
    if args.json:
        print(render.dumps(report.as_dict()))
        return 0
    print(_report_text(report))
    return 0


def _report_text(report: BackfillReport) -> str:
    rows = [
        [
            row.name,
            row.state,
            str(row.batches),
            str(row.rows),
            render.when(row.started_at),
            render.when(row.completed_at),
            render.text(row.requires),
            "checksum moved" if row.checksum_moved else render.clip(row.error or "", 40),
        ]
        for row in report.rows
    ]
    headers = ["NAME", "STATE", "BATCHES", "ROWS", "STARTED", "COMPLETED", "REQUIRES", "NOTE"]
    lines = [f"environment: {report.environment}", render.table(headers, rows)]
    if report.orphaned:
        lines.append(f"orphaned (in the ledger, declared no more): {', '.join(report.orphaned)}")
    return "\n".join(lines)


def _cmd_pending(args: argparse.Namespace) -> int:
    registry = load_registry(args.app)
    with Client.connect(database_url(args.database_url)) as client:
        report = _report(client, registry, _environment(args))
    if args.json:
        print(render.dumps(report.as_dict()))
    unswept = report.unswept
    if unswept:
        named = ", ".join(f"{row.name} ({row.state})" for row in unswept)
        raise BackfillPending(
            f"{len(unswept)} backfill(s) not swept in {report.environment}: {named}",
            detail={"environment": report.environment, "unswept": [r.name for r in unswept]},
        )
    if not args.json:
        print(f"every backfill is swept in {report.environment}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    registry = load_registry(args.app)
    if args.all == (args.name is not None):
        raise BackfillUnknown("name one backfill, or pass --all", detail={"argument": "name"})
    environment = _environment(args)
    url = database_url(args.database_url)
    with Client.connect(url) as client:
        report = _report(client, registry, environment)
        names = [b.name for b in registry.backfills()] if args.all else [args.name]
        failures: list[DurajobsError] = []
        for name in names:
            try:
                print(_run_one(args, client, registry, report, name, url))
            except DurajobsError as error:
                if not args.all:
                    raise
                # --all: each backfill on its own; one refusal does not stop the rest
                failures.append(error)
                print(f"{name}: error: {error}\n{name}: fix: {error.hint or error.fix}")
    if failures:
        return 1
    return 0


def _run_one(
    args: argparse.Namespace,
    client: Client,
    registry: Registry,
    report: BackfillReport,
    name: str,
    url: str,
) -> str:
    backfill = next((b for b in registry.backfills() if b.name == name), None)
    status = report.get(name)
    if backfill is None or status is None:
        raise BackfillUnknown(
            f"no backfill named {name!r} is declared in {args.app}",
            detail={"backfill": name},
            hint=f"durajobs backfill list --app {args.app}",
        )
    if status.state == "excluded":
        if args.all:
            return f"{name}: skipped, not run in {report.environment}"
        raise BackfillEnvironment(
            f"backfill {name} runs in {', '.join(backfill.environments)}, not in "
            f"{report.environment} (${ENVIRONMENT_VARIABLE})",
            detail={"backfill": name, "environment": report.environment},
        )
    _check_requires(args, client, backfill)
    if status.state == "running":
        if args.all:
            return f"{name}: skipped, its pass is live (job {status.job_id})"
        raise BackfillRunning(
            f"backfill {name} has a live pass: job {status.job_id} ({status.job_state})",
            detail={"backfill": name, "id": str(status.job_id)},
            hint=f"durajobs jobs show {status.job_id}",
        )
    if status.state == "completed" and not args.force:
        if args.all:
            return f"{name}: skipped, completed {render.when(status.completed_at)}"
        raise BackfillApplied(
            f"backfill {name} completed {render.when(status.completed_at)} (run "
            f"{status.run_id}); only --force runs a new pass",
            detail={"backfill": name, "run_id": str(status.run_id)},
            hint=f"durajobs backfill run {name} --write --force --app {args.app}",
        )
    force = bool(args.force)
    if not args.write:
        return f"{name}: would enqueue a pass ({_why(status, force)}); --write enqueues it"
    job = registry.get(name)
    assert job is not None, "a declared backfill has its job"
    enqueued = client.run(job.request({"force": force}).call())
    verdict = "deduped onto live job" if enqueued.deduped else "enqueued job"
    return f"{name}: {verdict} {enqueued.id}"


def _why(status: BackfillStatus, force: bool) -> str:
    if force and status.state == "completed":
        return "forced, after the pass that completed"
    return "never run" if status.state == "pending" else f"the last pass {status.state}"


def _check_requires(args: argparse.Namespace, client: Client, backfill: Backfill) -> None:
    if backfill.requires is None:
        return
    if not migration_applied(client.connection, backfill.requires, alembic_ini=args.alembic_config):
        raise BackfillMigrationPending(
            f"backfill {backfill.name} requires the application's migration "
            f"{backfill.requires}, which the database has not applied",
            detail={"backfill": backfill.name, "requires": backfill.requires},
        )


def add_backfill_commands(commands: Subcommands, with_database: WithDatabase) -> None:
    """Register `durajobs backfill list|pending|run`."""
    backfill = commands.add_parser("backfill", help="the backfills: list, gate and run them")
    actions = backfill.add_subparsers(dest="backfill_command", required=True)

    def leaf(name: str, about: str, run: Run) -> argparse.ArgumentParser:
        command = with_database(actions.add_parser(name, help=about, description=about))
        command.add_argument("--app", required=True, help="module:registry declaring them")
        command.add_argument(
            "--environment", help=f"where this runs (default: ${ENVIRONMENT_VARIABLE})"
        )
        command.add_argument("--json", action="store_true", help="print one JSON document")
        command.set_defaults(run=run)
        return command

    leaf("list", "each declared backfill's state, from the ledger", _cmd_list)
    leaf("pending", "exit 1 while any backfill is unswept here (a deploy gate)", _cmd_pending)
    run = leaf("run", "enqueue a backfill's pass (a dry run without --write)", _cmd_run)
    run.add_argument("name", nargs="?", help="the backfill (or --all)")
    run.add_argument("--all", action="store_true", help="every declared backfill, each alone")
    run.add_argument("--write", action="store_true", help="enqueue (default: a dry run)")
    run.add_argument("--force", action="store_true", help="a new pass after a completed one")
    run.add_argument(
        "--alembic-config",
        default="alembic.ini",
        help="the application's alembic.ini, to find a required revision's descendants",
    )
