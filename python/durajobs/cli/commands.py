"""The `durajobs` command."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import psycopg

from durajobs._db import calls
from durajobs._db.install_script import install_script, shipped_install_script
from durajobs._db.migrations import HEAD, migrate
from durajobs._values.durations import parse_duration
from durajobs._values.states import DeclareOutcome
from durajobs.cli.support import (
    add_retention_options,
    database_url,
    instant,
    load_registry,
    retention_from,
)
from durajobs.client import Client
from durajobs.declare.catalogue import conflict_error, conflicts, deploy_label, difference_text
from durajobs.declare.enqueue import EnqueueRequest
from durajobs.errors import ArgumentInvalid, ConfigInvalid, DurajobsError, JobInputInvalid
from durajobs.observe.tracing import checked_traceparent, current_traceparent
from durajobs.runtime import loop as event_loop


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise JobInputInvalid(f"--input is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise JobInputInvalid(f"--input must be a JSON object, got {type(value).__name__}")
    return value


def _traceparent(flag: str | None) -> str | None:
    """The trace context to stamp: --traceparent, else $TRACEPARENT (OpenTelemetry's carrier
    for a process started inside a trace), else the current span's (none in a bare CLI)."""
    if flag is not None:
        return checked_traceparent(flag, "--traceparent")
    inherited = os.environ.get("TRACEPARENT")
    if inherited:
        return checked_traceparent(inherited, "TRACEPARENT")
    return current_traceparent()


def _cmd_migrate(args: argparse.Namespace) -> int:
    url = database_url(args.database_url)
    migrate(url, args.revision)
    print(f"jobs schema at revision {args.revision}")
    if args.app:
        registry = load_registry(args.app)
        declared_by = deploy_label(f"durajobs migrate on {socket.gethostname()}")
        # one transaction: a refused deploy writes none of its declarations
        with psycopg.connect(url) as connection:
            answers = registry.declare(connection, declared_by=declared_by, replace=args.redeclare)
            found = conflicts(answers)
            if found:
                connection.rollback()
                raise conflict_error(found)
        counted = Counter(str(answer.outcome) for answer in answers)
        summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counted.items()))
        print(f"job catalogue: {summary or 'no jobs declared'}")
        for answer in answers:
            if answer.outcome is DeclareOutcome.REPLACED:
                print(f"  replaced {difference_text(answer)}")
    return 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from durajobs.declare.manifest import manifest_text

    text = manifest_text(load_registry(args.app))
    if args.out:
        # bytes, not the locale's encoding: the file is the same on every machine
        with open(args.out, "wb") as written:
            written.write(text.encode())
    else:
        sys.stdout.buffer.write(text.encode())
    return 0


def _cmd_roles(args: argparse.Namespace) -> int:
    call = calls.grant_roles(enqueuer=args.enqueuer, worker=args.worker, operator=args.operator)
    with Client.connect(database_url(args.database_url)) as client:
        granted = client.run(call)
    for grant in granted:
        verdict = "made" if grant.created else "adopted"
        print(f"{grant.kind}: {verdict} role {grant.role_name}")
    print("next: grant <role> to <application login>; see docs/operations.md, Security")
    return 0


def _declared_request(args: argparse.Namespace, payload: dict[str, Any]) -> EnqueueRequest:
    """The request the app's declaration of `args.name` makes for `payload`: its input model,
    key, tenant, queue and attempts, each flag given overriding its part."""
    registry = load_registry(args.app)
    job = registry.get(args.name)
    if job is None:
        raise ArgumentInvalid(
            f"{args.app} declares no job named {args.name!r} (it declares: "
            f"{', '.join(registry.names()) or 'none'})",
            detail={"argument": "name", "job": args.name},
        )
    request = job.request(
        payload,
        queue=args.queue,
        priority=args.priority,
        run_at=instant(args.run_at, "--run-at") if args.run_at else None,
    )
    overrides: dict[str, Any] = {"traceparent": _traceparent(args.traceparent)}
    for field, flag in (
        ("idempotency_key", args.key),
        ("tenant_id", args.tenant),
        ("max_attempts", args.max_attempts),
    ):
        if flag is not None:
            overrides[field] = flag
    return dataclasses.replace(request, **overrides)


def _cmd_sql(args: argparse.Namespace) -> int:
    # the shipped file when it is the one asked for: what a release's docs attach
    text = shipped_install_script() if args.since is None else install_script(since=args.since)
    sys.stdout.write(text)
    return 0


def _cmd_enqueue(args: argparse.Namespace) -> int:
    payload = _json_object(args.input)
    if args.app:
        call = _declared_request(args, payload).call()
    else:
        if args.key is None:
            raise ArgumentInvalid(
                "--key is required without --app (with --app the declaration derives it)",
                detail={"argument": "--key"},
            )
        call = calls.enqueue(
            args.name,
            payload,
            args.key,
            queue=args.queue,
            tenant_id=args.tenant,
            priority=args.priority,
            max_attempts=args.max_attempts,
            run_at=instant(args.run_at, "--run-at") if args.run_at else None,
            traceparent=_traceparent(args.traceparent),
        )
    with Client.connect(database_url(args.database_url)) as client:
        result = client.run(call)
    answer = {
        key: str(value) if key != "deduped" else value for key, value in asdict(result).items()
    }
    if args.json:
        print(json.dumps(answer))
    else:
        verdict = "deduped onto live job" if result.deduped else "enqueued job"
        print(f"{verdict} {result.id} (run {result.run_id})")
    return 0


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard; off the loopback only with an auth token."""
    token = args.auth_token or os.environ.get("DURAJOBS_DASHBOARD_TOKEN") or None
    if args.host not in LOOPBACK and token is None:
        raise ConfigInvalid(
            f"the dashboard would listen on {args.host} with no auth token: anyone who reaches "
            "it could requeue and remove jobs",
            detail={"field": "--auth-token"},
            hint='durajobs dashboard --host 0.0.0.0 --auth-token "$(openssl rand -hex 24)"',
        )
    try:
        import uvicorn

        from durajobs.dashboard import app
    except ImportError as missing:
        raise ConfigInvalid(
            f"the dashboard needs its extra ({missing.name} is not installed)",
            detail={"field": "dashboard"},
            hint="pip install 'durajobs[dashboard]'",
        ) from None
    registry = load_registry(args.app) if args.app else None
    served = app(
        database_url(args.database_url),
        read_only=args.read_only,
        auth_token=token,
        registry=registry,
        # without a token only the loopback's names are answered: a page whose name was
        # re-bound to 127.0.0.1 (DNS rebinding) sends its own
        allowed_hosts=() if token is not None else LOOPBACK,
    )
    print(f"dashboard on http://{args.host}:{args.port}/", flush=True)
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from durajobs.cli.demo import run_demo

    url = args.database_url or os.environ.get("DATABASE_URL")
    if url:
        run_demo(url, users=args.users)
        return 0
    from durajobs.cli.embedded import embedded_postgres

    print("no DATABASE_URL: starting an embedded Postgres for the demo")
    with embedded_postgres() as embedded_url:
        run_demo(embedded_url, users=args.users)
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from durajobs.observe.logs import configure
    from durajobs.runtime.worker import Worker

    configure()
    registry = load_registry(args.app)
    queues = [q for q in args.queues.split(",") if q] if args.queues else None
    url = database_url(args.database_url)
    retention = retention_from(args)  # refused here, before anything starts
    worker = Worker(
        registry,
        url,
        queues=queues,
        concurrency=args.concurrency,
        max_in_flight=args.max_in_flight,
        visibility=args.visibility,
        drain_deadline=args.drain_deadline,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        freeze_gc=True,  # this process is the worker's own
    )

    async def run() -> None:
        if not args.with_scheduler:
            await worker.run(install_signal_handlers=True)
            return
        from durajobs.services.scheduler import Scheduler

        scheduler = Scheduler(registry, url, retention=retention)
        scheduling = asyncio.ensure_future(scheduler.run())
        try:
            await worker.run(install_signal_handlers=True)
        finally:
            scheduler.stop()
            # the scheduler's round gets what the worker left of the drain budget (all of it
            # after a stop() without a drain): past it the round is abandoned, keeping its
            # lease until it runs out
            left = worker.drain_time_left()
            budget = worker.drain_deadline.total_seconds() if left is None else left
            await scheduler.drain(scheduling, budget)

    event_loop.run(run())
    if worker.abandoned:
        # a plain def body abandoned at the drain deadline still holds its thread, which the
        # interpreter would wait for at exit: leave now, the lease brings its job back
        logging.shutdown()
        os._exit(0)
    return 0


# the command's lease is short: a relay SIGKILLed mid-pass held publishing back for the whole
# lease (30 s by default in Python), and a pass that outlives it only re-publishes rows whose
# jobs dedupe on their outbox id
RELAY_COMMAND_CLAIM_LEASE = "5s"


def _cmd_relay(args: argparse.Namespace) -> int:
    from durajobs.observe.logs import configure
    from durajobs.services.relay import OutboxRelay

    configure()
    relay = OutboxRelay(
        args.source_url or database_url(args.database_url),
        database_url(args.database_url),
        batch_size=args.batch_size,
        claim_lease=args.claim_lease,
        interval=args.interval,
        idle_ceiling=args.idle_ceiling,
        relay_id=args.relay_id,
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, relay.stop)
        await relay.run()

    event_loop.run(run())
    return 0


def _cmd_scheduler(args: argparse.Namespace) -> int:
    from durajobs.observe.logs import configure
    from durajobs.services.scheduler import Scheduler

    configure()
    scheduler = Scheduler(
        load_registry(args.app),
        database_url(args.database_url),
        renew_every=parse_duration(args.renew_every, field="--renew-every"),
        retention=retention_from(args),
    )
    deadline = float(args.drain_deadline)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        asked = asyncio.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, asked.set)
        running = asyncio.ensure_future(scheduler.run())
        waiting = asyncio.ensure_future(asked.wait())
        await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not running.done():
            # the round in flight finishes within the deadline, or is abandoned to its lease
            await scheduler.drain(running, deadline)
        if not running.cancelled():
            running.result()  # a run() that failed on its own fails the command

    event_loop.run(run())
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="durajobs", description="Durable jobs for Postgres.")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_database(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
        command.add_argument("--database-url", help="default: $DATABASE_URL")
        return command

    migrate_command = with_database(commands.add_parser("migrate", help="install or upgrade"))
    migrate_command.add_argument("--revision", default=HEAD, help="alembic revision (head)")
    migrate_command.add_argument(
        "--app", help="module:registry whose jobs to write into the catalogue (jobs.declarations)"
    )
    migrate_command.add_argument(
        "--redeclare",
        action="store_true",
        help="with --app: this deploy's declarations replace different stored ones",
    )
    migrate_command.set_defaults(run=_cmd_migrate)

    manifest_command = commands.add_parser(
        "manifest",
        help="print the manifest of an app's jobs and tasks (JSON, byte-identical across runs)",
        description="Describe every job and task a registry declares, as one JSON document to "
        "commit and diff between deploys (durajobs.declare.manifest).",
    )
    manifest_command.add_argument("--app", required=True, help="module:registry")
    manifest_command.add_argument("--out", help="write it to this file instead of printing it")
    manifest_command.set_defaults(run=_cmd_manifest)

    roles_command = with_database(
        commands.add_parser(
            "roles",
            help="make the enqueuer, worker and operator roles (as the schema's owner)",
            description="Make (or adopt) three NOLOGIN roles and let them call the jobs "
            "functions (jobs.grant_roles); grant one to each application login afterwards.",
        )
    )
    for kind in ("enqueuer", "worker", "operator"):
        roles_command.add_argument(f"--{kind}", help=f"the {kind} role's name (durajobs_{kind})")
    roles_command.set_defaults(run=_cmd_roles)

    sql_command = commands.add_parser(
        "sql",
        help="print the schema as one psql script (durajobs sql > install.sql)",
        description="Print the psql script that installs the jobs schema (or, with --since, "
        "upgrades it from that revision), recording the revision as `durajobs migrate` does.",
    )
    sql_command.add_argument("--since", help="the revision the database is at (upgrade script)")
    sql_command.set_defaults(run=_cmd_sql)

    enqueue_command = with_database(commands.add_parser("enqueue", help="enqueue one job"))
    enqueue_command.add_argument("name", help="the job's name (its durable queue key)")
    enqueue_command.add_argument("--input", required=True, help="the job's input, a JSON object")
    enqueue_command.add_argument(
        "--app",
        help="module:registry: validate --input with the job's model and take its key, tenant, "
        "queue and attempts from the declaration",
    )
    enqueue_command.add_argument(
        "--key",
        help="idempotency key: a second enqueue while live dedupes (required without --app)",
    )
    enqueue_command.add_argument("--queue", help="queue (default: the declaration's, or 'default')")
    enqueue_command.add_argument("--tenant", help="tenant id (default: the declaration's, or none)")
    enqueue_command.add_argument("--run-at", help="ISO 8601 instant with a zone (default: now)")
    enqueue_command.add_argument(
        "--priority", type=int, help="lower runs first (default: the declaration's, or 0)"
    )
    enqueue_command.add_argument(
        "--max-attempts", type=int, help="default: the declaration's, or 20"
    )
    enqueue_command.add_argument(
        "--traceparent",
        help="W3C trace context the job's run continues (default: $TRACEPARENT, if set)",
    )
    enqueue_command.add_argument("--json", action="store_true", help="print the answer as JSON")
    enqueue_command.set_defaults(run=_cmd_enqueue)

    worker_command = with_database(commands.add_parser("worker", help="run a worker"))
    worker_command.add_argument("--app", required=True, help="module:registry to run")
    worker_command.add_argument("--queues", help="comma-separated (default: the registry's)")
    worker_command.add_argument("--concurrency", type=int, default=8, help="slots per queue (8)")
    worker_command.add_argument("--max-in-flight", type=int, help="process cap (default: none)")
    worker_command.add_argument("--visibility", type=float, default=30.0, help="lease seconds (30)")
    worker_command.add_argument(
        "--drain-deadline", type=float, default=25.0, help="SIGTERM budget in seconds (25)"
    )
    worker_command.add_argument(
        "--with-scheduler", action="store_true", help="also run the cron scheduler in this process"
    )
    worker_command.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (default: off)"
    )
    worker_command.add_argument(
        "--metrics-host", default="0.0.0.0", help="address the metrics server binds (0.0.0.0)"
    )
    add_retention_options(worker_command, sweeping=True)  # with --with-scheduler
    worker_command.set_defaults(run=_cmd_worker)

    scheduler_command = with_database(commands.add_parser("scheduler", help="run the scheduler"))
    scheduler_command.add_argument("--app", required=True, help="module:registry to schedule")
    scheduler_command.add_argument(
        "--renew-every",
        default="10s",
        help="how often the leader renews its lease, which lasts three times this: a dead "
        "leader is replaced within it (10s)",
    )
    scheduler_command.add_argument(
        "--drain-deadline",
        type=float,
        default=25.0,
        help="SIGTERM budget in seconds for the round in flight; past it the round is abandoned "
        "and the lease kept until it runs out (25)",
    )
    add_retention_options(scheduler_command, sweeping=True)
    scheduler_command.set_defaults(run=_cmd_scheduler)

    relay_command = with_database(commands.add_parser("relay", help="run the outbox relay"))
    relay_command.add_argument(
        "--source-url", help="the database holding the outbox (default: the queue's own)"
    )
    relay_command.add_argument("--batch-size", type=int, default=100, help="rows a pass (100)")
    relay_command.add_argument(
        "--claim-lease",
        default=RELAY_COMMAND_CLAIM_LEASE,
        help="how long a pass holds its rows: a killed relay's rows wait this long for another "
        f"relay ({RELAY_COMMAND_CLAIM_LEASE}; safe to keep short, a re-publish meets its job)",
    )
    relay_command.add_argument(
        "--interval",
        default="200ms",
        help="the pause after a pass that found less than a batch (a full pass goes straight on)",
    )
    relay_command.add_argument(
        "--idle-ceiling", default="2s", help="the longest pause when there is nothing to publish"
    )
    relay_command.add_argument("--relay-id", help="this relay's id (default: host:pid:random)")
    relay_command.set_defaults(run=_cmd_relay)

    dashboard = with_database(
        commands.add_parser("dashboard", help="serve the operator dashboard (a web UI)")
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="where to listen (127.0.0.1)")
    dashboard.add_argument("--port", type=int, default=8080, help="the port (8080)")
    dashboard.add_argument(
        "--auth-token",
        help="required off the loopback: a browser signs in with it, a script sends "
        "`Authorization: Bearer TOKEN` (default: $DURAJOBS_DASHBOARD_TOKEN)",
    )
    dashboard.add_argument("--read-only", action="store_true", help="refuse every action")
    dashboard.add_argument("--app", help="module:registry, for each job's retries ahead")
    dashboard.set_defaults(run=_cmd_dashboard)

    demo_command = with_database(commands.add_parser("demo", help="run the demo"))
    demo_command.add_argument("--users", type=int, default=40, help="sign-ups to process (40)")
    demo_command.set_defaults(run=_cmd_demo)

    from durajobs.cli.backfills import add_backfill_commands
    from durajobs.cli.operator import add_operator_commands

    add_operator_commands(commands, with_database)
    add_backfill_commands(commands, with_database)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; answer the exit status (1 for a durajobs error, with its fix)."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except DurajobsError as error:
        print(f"error: {error}", file=sys.stderr)
        if error.hint:
            print(f"fix: {error.hint}", file=sys.stderr)
        if error.docs:
            print(f"see: {error.docs}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
