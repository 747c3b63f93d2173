"""The operator commands of `durajobs`: look at jobs, queues, tasks, workers and counters, and act
on them. `durajobs.cli` registers them through `add_operator_commands`, handing over its own
URL and registry helpers.

    durajobs jobs list [--queue Q] [--name N] [--state S] [--tenant T] [--id-prefix P] [--key K]
                       [--run RUN_ID]
                       [--created-from ISO] [--created-to ISO] [--limit N]
                       [--after ID | --before ID]
    durajobs jobs show ID [--app module:registry]
    durajobs jobs cancel ID [--reason TEXT]
    durajobs jobs requeue ID [--from-step NAME]
    durajobs jobs remove ID
    durajobs jobs promote ID
    durajobs jobs drain ID
    durajobs jobs bulk requeue|remove|promote --state S [--queue Q] [--name N] [--tenant T]
                       [--until-done]
    durajobs jobs purge [--keep-done D] [--keep-ended D] [--keep-published D]
                        [--purge-batch N] [--until-done]
    durajobs queues [list]
    durajobs queues pause Q [--by WHO]
    durajobs queues resume Q
    durajobs queues depth [Q ...]
    durajobs tasks [list]
    durajobs tasks pause T
    durajobs tasks resume T
    durajobs workers
    durajobs counters [--name N] [--since ISO | --minutes M] [--buckets]
    durajobs limits show [--name JOB]
    durajobs limits set [--queue Q] [--tenant T | --every-tenant] [--concurrency N]
                        [--rate K/WINDOW] [--by WHO]
    durajobs limits clear [--queue Q] [--tenant T | --every-tenant]
                          [--kind concurrency|rate|all]

Every command takes --database-url (default $DATABASE_URL) and --json. A refusal prints
`error: X_...: ...` and `fix: ...` on stderr and exits 1, having changed nothing; an argument
argparse cannot read (a job id that is not a UUID) exits 2.

--json prints one document on stdout. Ids and instants are strings (instants ISO 8601 with their
zone), intervals are seconds. The keys are stable:

    jobs list      {"jobs": [JOB, ...], "next_after": ID | null, "prev_before": ID | null}
                   JOB = {"id", "run_id", "name", "queue", "state", "tenant_id", "attempt",
                          "max_attempts", "priority", "run_at", "created_at", "updated_at",
                          "finished_at", "last_error", "last_error_code"}
                   next_after: the last row's id, to pass as --after (older rows); null when the
                   page is empty, or is short and was not read with --before.
                   prev_before: the first row's id, to pass as --before (newer rows); null when
                   the page is empty, is the first page (no cursor), or is a short --before page.
    jobs show      {"job": {every column of jobs.jobs}, "steps": [{"name", "status",
                    "attempts", "started_at", "updated_at", "finished_at", "wake_at",
                    "duration_ms", "output_bytes", "error"}, ...], "queue_paused": bool,
                    "retries_ahead": [{"after_attempt", "delay_seconds"}, ...] | null,
                    "backfill": {the backfill's state, "this_pass": {...} | null} | null,
                    "children": {"total", "states": {STATE: n}, "first": [{"id", "name",
                    "state"}, ...]}}  (the job's "result" is what a done body returned)
                   (JobDetail.as_json; retries_ahead is null without --app or a declaration,
                   backfill null without --app or for a job that is not a backfill's)
    jobs cancel|requeue|remove|promote|drain
                   {"id": ID, "action": "cancelled" | "requeued" | "removed" | "promoted" |
                    "drained", "ok": true}
    jobs bulk      {"action": "requeued" | "removed" | "promoted", "affected": rows moved in
                    all calls, "remaining": what a next call could still move, "calls": n}
    jobs purge     {"jobs", "steps", "outbox", "events": rows deleted in all calls,
                    "calls": n, "more": bool (the last call filled a batch: call again)}
    queues         {"queues": [{"queue", "ready", "delayed", "running", "suspended", "dead",
                    "oldest_ready_age_seconds", "paused", "depth"}, ...],
                    "horizon": {"holder", "pid", "user", "name", "state", "since",
                    "age_seconds", "xid_age"} | null (the oldest holder of the xmin horizon)}
    queues pause|resume
                   {"queue": Q, "action": "paused" | "resumed", "changed": bool}
    queues depth   [{"queue", "running", "due", "draining_held", "depth"}, ...]
    tasks          {"tasks": [{"task", "watermark", "last_fired_occurrence", "last_fired_at",
                    "paused"}, ...]}
    tasks pause|resume
                   {"task": T, "action": "paused" | "resumed", "changed": bool}
    workers        {"workers": [{"id", "host", "pid", "queues", "slots", "in_flight",
                    "in_flight_count", "started_at", "heartbeat_at", "heartbeat_age_seconds",
                    "expires_at", "draining_at"}, ...]}
    counters       {"since": ISO, "totals": [{"name", "done", "retried", "failed", "dead",
                    "duration_ms", "avg_duration_ms"}, ...]}
    counters --buckets
                   {"since": ISO, "buckets": [{"name", "tier", "bucket", "done", "retried",
                    "failed", "dead", "duration_ms", "avg_duration_ms"}, ...]}
    limits show    {"limits": [{"scope", "name", "concurrency_key", "queue", "tenant_id",
                    "concurrency", "when_busy", "rate", "per", "started", "running",
                    "waiting", "held_back", "holders"}, ...]}
    limits set     {"limit": {"queue", "tenant_id", "every_tenant", "concurrency", "rate",
                    "per", "set_by", "set_at"}}
    limits clear   {"queue", "tenant_id", "every_tenant", "kind", "removed": bool}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from textwrap import indent
from typing import TYPE_CHECKING, Any, TypeAlias
from uuid import UUID

from durajobs._db import calls
from durajobs._values.durations import parse_duration
from durajobs._values.records import (
    BulkResult,
    CounterRow,
    CounterTotal,
    HorizonHolder,
    JobSummary,
    JobType,
    LimitRow,
    QueueDepth,
    QueueStat,
    TaskState,
    WorkerRecord,
)
from durajobs.cli.support import (
    add_retention_options,
    database_url,
    instant,
    load_registry,
    retention_from,
)
from durajobs.client import Client
from durajobs.declare.backfill import current_environment
from durajobs.display import render
from durajobs.display.inspection import JobDetail, job_detail
from durajobs.errors import (
    ArgumentInvalid,
    DurajobsError,
    JobNotCancellable,
    JobNotDrainable,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
)
from durajobs.services.backfills import read_report
from durajobs.services.retention import NOTHING as NOTHING_PURGED

if TYPE_CHECKING:
    from durajobs.declare.registry import Registry

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
WithDatabase: TypeAlias = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
Run: TypeAlias = Callable[[argparse.Namespace], int]


DEFAULT_PAGE = 100
DEFAULT_COUNTER_MINUTES = 60.0


# -- arguments ------------------------------------------------------------------------------


def _job_id(text: str) -> UUID:
    """argparse type of a job id: a malformed one stops at the parser (exit 2)."""
    try:
        return UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a job id (a UUID, as `durajobs jobs list` prints it)"
        ) from None


def _optional_instant(text: str | None, option: str) -> datetime | None:
    return None if text is None else instant(text, option)


class _Blanks(dict[str, Any]):
    """A refusal's detail, naming a missing key as itself, so a fix always formats."""

    def __missing__(self, key: str) -> str:
        return key.upper()


def _speaking_commands(run: Run) -> Run:
    """Run a command, giving each refusal the fix an operator types rather than the SQL one."""

    def speaking(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except DurajobsError as error:
            # the fixes jobs.error_codes gives are SQL calls; a shell user gets the command
            fix = error.shell_fix
            if fix is not None:
                error.hint = fix.format_map(_Blanks(error.detail))
            raise

    return speaking


def _connect(args: argparse.Namespace) -> Client:
    return Client.connect(database_url(args.database_url))


def _answer(args: argparse.Namespace, document: Any, human: str) -> int:
    print(render.dumps(document) if args.json else human)
    return 0


# -- jobs list ------------------------------------------------------------------------------


def _page_cursors(
    page: Sequence[JobSummary], page_size: int, after: UUID | None, before: UUID | None
) -> tuple[UUID | None, UUID | None]:
    """(next_after, prev_before) for a page answered newest first.

    A short page ends the walk in its own direction only: a short --before page still has
    older rows behind it (the cursor's), a short --after page newer ones.
    """
    if not page:
        return None, None
    full = len(page) == page_size
    next_after = page[-1].id if full or before is not None else None
    prev_before = page[0].id if after is not None or (before is not None and full) else None
    return next_after, prev_before


def _summary_row(job: JobSummary) -> list[str]:
    return [
        str(job.id),
        job.name,
        job.queue,
        str(job.state),
        f"{job.attempt}/{job.max_attempts}",
        render.when(job.created_at),
        render.text(job.last_error_code),
    ]


def _page_text(
    page: Sequence[JobSummary], next_after: UUID | None, prev_before: UUID | None
) -> str:
    if not page:
        return "no jobs match"
    headers = ["ID", "NAME", "QUEUE", "STATE", "ATTEMPT", "CREATED", "ERROR"]
    lines = [render.table(headers, [_summary_row(job) for job in page])]
    if next_after is not None:
        lines.append(f"next page: the same command with --after {next_after}")
    else:
        lines.append("last page")
    if prev_before is not None:
        lines.append(f"newer rows: the same command with --before {prev_before}")
    return "\n".join(lines)


def _cmd_jobs_list(args: argparse.Namespace) -> int:
    call = calls.list_jobs(
        queue=args.queue,
        name=args.name,
        state=args.state,
        tenant_id=args.tenant,
        id_prefix=args.id_prefix,
        created_from=_optional_instant(args.created_from, "--created-from"),
        created_to=_optional_instant(args.created_to, "--created-to"),
        page_size=args.limit,
        after=args.after,
        before=args.before,
        idempotency_key=args.key,
        run_id=args.run_id,
    )
    with _connect(args) as client:
        page = client.run(call)
    next_after, prev_before = _page_cursors(page, args.limit, args.after, args.before)
    document = {"jobs": page, "next_after": next_after, "prev_before": prev_before}
    return _answer(args, document, _page_text(page, next_after, prev_before))


# -- jobs show ------------------------------------------------------------------------------


def _number(value: Any) -> str:
    # jsonb numbers arrive as int or float; 15 significant digits never print 1e+06 for a count
    return f"{value:.15g}" if isinstance(value, float) else render.text(value)


def _progress_text(progress: dict[str, Any] | None) -> str:
    if not progress:
        return render.NOTHING
    done, total = progress.get("done"), progress.get("total")
    shown = _number(done) if total is None else f"{_number(done)}/{_number(total)}"
    if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
        shown += f" ({100 * done / total:.0f}%)"
    if progress.get("note"):
        shown += f" {progress['note']}"
    return f"{shown} at {render.when(progress.get('at'))}"


def _last_error_text(job: dict[str, Any]) -> str:
    code, message = job.get("last_error_code"), job.get("last_error")
    if code and message:
        return f"{code}: {message}"
    return render.text(code or message)


def _holder_text(job: dict[str, Any]) -> str:
    if not job.get("claimed_by"):
        return render.NOTHING
    holder = f"{job['claimed_by']} (claim {job.get('claims')}"
    if job.get("lease_expires_at"):
        holder += f", lease until {render.when(job['lease_expires_at'])}"
    return holder + ")"


def _job_fields(detail: JobDetail) -> list[tuple[str, str]]:
    job = detail.job
    paused = " (paused)" if detail.queue_paused else ""
    return [
        ("id", str(job["id"])),
        ("run id", str(job["run_id"])),
        ("name", job["name"]),
        ("queue", f"{job['queue']}{paused}"),
        ("state", job["state"]),
        ("tenant", render.text(job.get("tenant_id"))),
        ("idempotency key", render.text(job.get("idempotency_key"))),
        ("attempt", f"{job['attempt']}/{job['max_attempts']}"),
        ("priority", render.text(job.get("priority"))),
        ("run at", render.when(job.get("run_at"))),
        ("created", render.when(job.get("created_at"))),
        ("updated", render.when(job.get("updated_at"))),
        ("finished", render.when(job.get("finished_at"))),
        ("claimed by", _holder_text(job)),
        ("enqueued by", render.text(job.get("enqueued_by"))),
        ("input", render.clip(json.dumps(job.get("input")), 100)),
        ("result", _result_text(job)),
        ("parent", render.text(job.get("parent_id"))),
        ("children", _children_text(detail.children)),
        ("progress", _progress_text(job.get("progress"))),
        ("last error", _last_error_text(job)),
        ("limit", _limit_detail_text(detail.limit)),
        *[("set limit", _rule_detail_text(rule)) for rule in detail.rules],
        *([("backfill", _backfill_text(detail.backfill))] if detail.backfill else []),
    ]


def _result_text(job: dict[str, Any]) -> str:
    """What a done job returned (None stores none), clipped; nothing for any other state."""
    if job["state"] != "done" or job.get("result") is None:
        return render.NOTHING
    return render.clip(json.dumps(job["result"]), 100)


def _children_text(children: dict[str, Any]) -> str:
    """How many jobs the job's steps enqueued, by state."""
    total = int(children.get("total") or 0)
    if not total:
        return render.NOTHING
    states = ", ".join(f"{n} {state}" for state, n in sorted(children["states"].items()))
    return f"{total} ({states})"


def _rule_detail_text(rule: dict[str, Any]) -> str:
    """A limit set in SQL that counts the row, and what it does to the row now."""
    scope = f"tenant {rule['tenant_id']}" if rule["tenant_id"] is not None else "every tenant"
    scope += f" in queue {rule['queue']}" if rule["queue"] is not None else " in every queue"
    bounds = []
    if rule["concurrency"] is not None:
        bounds.append(f"{rule['running']} of {rule['concurrency']} running")
    if rule["rate"] is not None:
        per = render.span(float(rule["per_seconds"]))
        bounds.append(f"{rule['started']} of {rule['rate']} started per {per}")
    text = f"{scope}: {', '.join(bounds)}"
    if rule["held_back"]:
        text += ": held back until it has room"
    return text


def _limit_detail_text(limit: dict[str, Any] | None) -> str:
    """The job's concurrency limit and what it does to this row now."""
    if limit is None:
        return render.NOTHING
    text = f"{limit['concurrency']}"
    if limit["keyed"]:
        text += f" per key {limit['key']!r}"
        if limit["when_busy"] == "fail":
            text += " (refused when busy)"
    text += f", {limit['running']} running"
    if limit["held_back"]:
        text += ": held back until a place is free"
    return text


def _output_size(size: Any) -> str:
    return render.NOTHING if size is None else f"{size} B"


def _steps_text(steps: Sequence[dict[str, Any]]) -> str:
    if not steps:
        return "steps: none"
    headers = ["NAME", "STATUS", "ATTEMPTS", "DURATION", "OUTPUT", "ERROR"]
    rows = [
        [
            step["name"],
            step["status"],
            render.text(step.get("attempts")),
            render.span(None if step.get("duration_ms") is None else step["duration_ms"] / 1000),
            _output_size(step.get("output_bytes")),
            render.clip(render.text(step.get("error")), 40),
        ]
        for step in steps
    ]
    return "steps:\n" + indent(render.table(headers, rows), "  ")


def _retries_text(detail: JobDetail, app: str | None) -> str:
    ahead = detail.retries_ahead
    if ahead is None:
        if app is None:
            return "retries ahead: unknown: pass --app module:registry"
        return f"retries ahead: unknown: {detail.job['name']} is not declared in {app}"
    if not ahead:
        return "retries ahead: none"
    waits = [
        f"  after attempt {retry.after_attempt}: wait {render.span(retry.delay.total_seconds())}"
        for retry in ahead
    ]
    return "\n".join([f"retries ahead: {len(ahead)} (before jitter)", *waits])


def _detail_text(detail: JobDetail, app: str | None) -> str:
    sections = [render.fields(_job_fields(detail))]
    stack = detail.job.get("last_error_stack")
    if stack:
        sections.append("stack:\n" + indent(stack.rstrip("\n"), "  "))
    sections += [_steps_text(detail.steps), _retries_text(detail, app)]
    return "\n".join(sections)


def _cmd_jobs_show(args: argparse.Namespace) -> int:
    registry = load_registry(args.app) if args.app else None
    with _connect(args) as client:
        detail = job_detail(client.inspect_job(args.id), registry)
        if registry is not None and registry.is_backfill(detail.job["name"]):
            environment = args.environment or current_environment()
            backfill = _backfill_of(client, registry, detail, environment)
            detail = dataclasses.replace(detail, backfill=backfill)
    return _answer(args, detail.as_json(), _detail_text(detail, args.app))


def _backfill_of(
    client: Client, registry: Registry, detail: JobDetail, environment: str
) -> dict[str, Any]:
    """The backfill's state as `durajobs backfill list` shows it, and this job's pass."""
    name = detail.job["name"]
    declared = [b for b in registry.backfills() if b.name == name]
    (status,) = read_report(client.run, declared, environment).rows
    this_pass = next(
        (p for p in client.run(calls.backfills(name)) if str(p.job_id) == str(detail.job["id"])),
        None,
    )
    return {**status.as_dict(), "this_pass": None if this_pass is None else asdict(this_pass)}


def _backfill_text(backfill: dict[str, Any] | None) -> str:
    if backfill is None:
        return render.NOTHING
    mine = backfill["this_pass"]
    if mine is None:
        return f"{backfill['state']} (this pass: not started)"
    counts = f"{mine['batches']} batches, {mine['rows_processed']} rows"
    return f"{backfill['state']} (this pass: {mine['status']}, {counts})"


# -- jobs cancel, requeue, remove, promote --------------------------------------------------


def _acted(
    args: argparse.Namespace, action: str, answered: bool, refusal: type[DurajobsError]
) -> int:
    if not answered:
        # each function raises its refusal today; a false answer is one all the same
        raise refusal(f"job {args.id} was not {action}", detail={"id": str(args.id)})
    human = f"{action} job {args.id}"
    if getattr(args, "from_step", None):
        human += f" from step {args.from_step}"
    return _answer(args, {"id": args.id, "action": action, "ok": True}, human)


def _cmd_jobs_cancel(args: argparse.Namespace) -> int:
    # an unknown id is X_JOB_NOT_CANCELLABLE here as in SQL: one code whatever the surface
    with _connect(args) as client:
        answered = client.run(calls.cancel(args.id, reason=args.reason, children=args.children))
    return _acted(args, "cancelled", answered, JobNotCancellable)


def _cmd_jobs_requeue(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        answered = client.run(calls.requeue(args.id, from_step=args.from_step))
    return _acted(args, "requeued", answered, JobNotRequeueable)


def _cmd_jobs_remove(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        answered = client.run(calls.remove(args.id))
    return _acted(args, "removed", answered, JobNotRemovable)


def _cmd_jobs_drain(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        answered = client.run(calls.drain(args.id))
    return _acted(args, "drained", answered, JobNotDrainable)


def _cmd_jobs_promote(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        answered = client.run(calls.promote(args.id))
    return _acted(args, "promoted", answered, JobNotPromotable)


# -- jobs bulk ------------------------------------------------------------------------------

BulkBuilder: TypeAlias = Callable[..., calls.Call[BulkResult]]

_BULK: dict[str, tuple[BulkBuilder, str]] = {
    "requeue": (calls.requeue_many, "requeued"),
    "remove": (calls.remove_many, "removed"),
    "promote": (calls.promote_many, "promoted"),
}


def _bulk_text(action: str, state: str, affected: int, remaining: int, made: int) -> str:
    text = f"{action} {affected} {state} job(s) in {made} call(s); {remaining} remaining"
    if remaining:
        text += " (run it again, or pass --until-done)"
    return text


def _cmd_jobs_bulk(args: argparse.Namespace) -> int:
    build, action = _BULK[args.action]
    call = build(args.state, queue=args.queue, name=args.name, tenant_id=args.tenant)
    affected = made = 0
    with _connect(args) as client:
        while True:
            result = client.run(call)
            affected, made = affected + result.affected, made + 1
            # a call that moved nothing would move nothing again (the rest is locked or held)
            if not (args.until_done and result.affected > 0 and result.remaining > 0):
                break
    document = {
        "action": action,
        "affected": affected,
        "remaining": result.remaining,
        "calls": made,
    }
    human = _bulk_text(action, args.state, affected, result.remaining, made)
    return _answer(args, document, human)


# -- jobs purge -----------------------------------------------------------------------------


def _cmd_jobs_purge(args: argparse.Namespace) -> int:
    retention = retention_from(args)
    assert retention is not None  # `jobs purge` has no --no-purge
    deleted, made = NOTHING_PURGED, 0
    with _connect(args) as client:
        while True:
            answer = client.run(retention.call())
            deleted, made = deleted + answer, made + 1
            more = retention.more_after(answer)
            if not (args.until_done and more):
                break
    document = {**asdict(deleted), "calls": made, "more": more}
    human = (
        f"purged {deleted.jobs} job(s), {deleted.steps} step(s), {deleted.outbox} outbox row(s)"
        f" and {deleted.events} event(s) in {made} call(s)"
    )
    if more:
        human += "; more is left (run it again, or pass --until-done)"
    return _answer(args, document, human)


# -- queues ---------------------------------------------------------------------------------


def _queue_document(stat: QueueStat, depth: int) -> dict[str, Any]:
    age = stat.oldest_ready_age
    return {
        "queue": stat.queue,
        "ready": stat.ready,
        "delayed": stat.delayed,
        "running": stat.running,
        "suspended": stat.suspended,
        "dead": stat.dead,
        "oldest_ready_age_seconds": None if age is None else age.total_seconds(),
        "paused": stat.paused,
        "depth": depth,
    }


def _queues_text(queues: Sequence[dict[str, Any]]) -> str:
    if not queues:
        return "no queue holds a job"
    headers = ["QUEUE", "READY", "DELAYED", "RUNNING", "SUSPENDED", "DEAD", "OLDEST", "PAUSED"]
    headers.append("DEPTH")
    rows = [
        [
            queue["queue"],
            *(str(queue[key]) for key in ("ready", "delayed", "running", "suspended", "dead")),
            render.span(queue["oldest_ready_age_seconds"]),
            "yes" if queue["paused"] else "no",
            str(queue["depth"]),
        ]
        for queue in queues
    ]
    return render.table(headers, rows)


def _horizon_document(holder: HorizonHolder | None) -> dict[str, Any] | None:
    if holder is None:
        return None
    return {
        "holder": holder.holder,
        "pid": holder.pid,
        "user": holder.user_name,
        "name": holder.name,
        "state": holder.state,
        "since": None if holder.since is None else holder.since.isoformat(),
        "age_seconds": holder.age_seconds,
        "xid_age": holder.xid_age,
    }


def _horizon_text(horizon: dict[str, Any] | None) -> str:
    """One line under the queues: who holds the xmin horizon (docs/operations.md section 19)."""
    if horizon is None:
        return "xmin horizon: nothing holds it"
    who = {"session": f"session {horizon['pid']}", "prepared": "prepared transaction"}.get(
        horizon["holder"], f"replication slot {horizon['name']}"
    )
    details = ", ".join(
        str(part)
        for part in (
            horizon["user"],
            horizon["name"] if horizon["holder"] != "slot" else None,
            horizon["state"],
        )
        if part
    )
    held = f" for {render.span(horizon['age_seconds'])}" if horizon["age_seconds"] else ""
    return f"xmin horizon: held{held} by {who} ({details}), {horizon['xid_age']:,} transactions old"


def _cmd_queues_list(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        stats = client.queue_stats()
        depths = {row.queue: row.depth for row in client.queue_depth()}
        horizon = _horizon_document(client.horizon())
    # a paused queue has no depth row: more workers would not drain it
    queues = [_queue_document(stat, depths.get(stat.queue, 0)) for stat in stats]
    text = _queues_text(queues) + "\n" + _horizon_text(horizon)
    return _answer(args, {"queues": queues, "horizon": horizon}, text)


_UNCHANGED = {"paused": "was already paused", "resumed": "was not paused"}


def _switched(args: argparse.Namespace, kind: str, name: str, action: str, changed: bool) -> int:
    """Pausing twice is not a refusal: the answer says whether this call changed anything."""
    human = f"{action} {kind} {name}" if changed else f"{kind} {name} {_UNCHANGED[action]}"
    return _answer(args, {kind: name, "action": action, "changed": changed}, human)


def _cmd_queues_pause(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        changed = client.pause_queue(args.queue, paused_by=args.by)
    return _switched(args, "queue", args.queue, "paused", changed)


def _cmd_queues_resume(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        changed = client.resume_queue(args.queue)
    return _switched(args, "queue", args.queue, "resumed", changed)


def _depth_rows(answered: Sequence[QueueDepth], asked: Sequence[str]) -> list[QueueDepth]:
    """The named queues in the order asked, a zero row for one without live work (or paused)."""
    if not asked:
        return list(answered)
    found = {row.queue: row for row in answered}
    return [found.get(queue, QueueDepth(queue, 0, 0, 0, 0)) for queue in dict.fromkeys(asked)]


def _cmd_queues_depth(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        rows = _depth_rows(client.queue_depth(args.queues or None), args.queues)
    # named queues: one bare number a line, for a script; otherwise the queue beside its number
    lines = [str(row.depth) if args.queues else f"{row.queue} {row.depth}" for row in rows]
    return _answer(args, rows, "\n".join(lines))


# -- tasks ----------------------------------------------------------------------------------


def _tasks_text(tasks: Sequence[TaskState]) -> str:
    if not tasks:
        return "no task armed (a scheduler arms its registry's tasks)"
    headers = ["TASK", "WATERMARK", "LAST OCCURRENCE", "LAST FIRED", "PAUSED"]
    rows = [
        [
            task.task,
            render.when(task.watermark),
            render.when(task.last_fired_occurrence),
            render.when(task.last_fired_at),
            "yes" if task.paused else "no",
        ]
        for task in tasks
    ]
    return render.table(headers, rows)


def _job_types_text(types: Sequence[JobType]) -> str:
    if not types:
        return (
            "no job declared in the catalogue (a worker declares its registry's jobs at start, "
            "as does `durajobs migrate --app module:registry`)"
        )
    headers = ["NAME", "QUEUE", "ATTEMPTS", "PRIORITY", "TENANT", "LIMIT", "DECLARED BY", "SEEN"]
    rows = [
        [
            kind.name,
            kind.queue,
            str(kind.max_attempts),
            str(kind.priority),
            "required" if kind.tenant_required else "none",
            _limit_text(kind),
            kind.declared_by,
            render.when(kind.seen_at),
        ]
        for kind in types
    ]
    return render.table(headers, rows)


def _limit_text(kind: JobType) -> str:
    if kind.concurrency is None:
        return "-"
    return f"{kind.concurrency} per key" if kind.concurrency_keyed else str(kind.concurrency)


def _limits_text(rows: Sequence[LimitRow]) -> str:
    if not rows:
        return "no limit is declared or set"
    headers = ["SCOPE", "OF", "LIMIT", "RUNNING", "WAITING", "HELD BACK", "HOLDERS"]
    table = [
        [
            row.scope,
            _limit_scope_text(row),
            _limit_bound_text(row),
            str(row.running),
            str(row.waiting),
            str(row.held_back),
            ", ".join(row.holders) or render.NOTHING,
        ]
        for row in rows
    ]
    return render.table(headers, table)


def _limit_scope_text(row: LimitRow) -> str:
    """What the limit counts: the job (and key), or the rule's tenant and queue."""
    if row.scope == "job":
        key = f" key {row.concurrency_key!r}" if row.concurrency_key is not None else ""
        return f"{row.name}{key}"
    parts = []
    if row.tenant_id is not None:
        parts.append(f"tenant {row.tenant_id}")
    parts.append(f"queue {row.queue}" if row.queue is not None else "every queue")
    return ", ".join(parts)


def _limit_bound_text(row: LimitRow) -> str:
    """'3 running', '100 per 60s (12 started)', or both."""
    bounds = []
    if row.concurrency is not None:
        bounds.append(f"{row.concurrency} running{' (fail)' if row.when_busy == 'fail' else ''}")
    if row.rate is not None and row.per is not None:
        bounds.append(
            f"{row.rate} per {render.span(row.per.total_seconds())} ({row.started or 0} started)"
        )
    return "; ".join(bounds)


def _cmd_limits_show(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        rows = client.limits(args.name)
    return _answer(args, {"limits": rows}, _limits_text(rows))


def _rate_option(value: str | None) -> tuple[int | None, timedelta | None]:
    """`--rate K/WINDOW` (e.g. 100/1m) as (K, the window); (None, None) when not given."""
    if value is None:
        return None, None
    count, slash, window = value.partition("/")
    if not slash or not count.strip().isdigit():
        raise ArgumentInvalid(
            f"--rate must be STARTS/WINDOW such as 100/1m, got {value!r}",
            detail={"argument": "--rate"},
        )
    try:
        per = parse_duration(window.strip(), field="--rate")
    except DurajobsError as refused:
        raise ArgumentInvalid(str(refused), detail={"argument": "--rate"}) from None
    return int(count), per


def _cmd_limits_set(args: argparse.Namespace) -> int:
    rate, per = _rate_option(args.rate)
    with _connect(args) as client:
        rule = client.set_limit(
            queue=args.queue,
            tenant_id=args.tenant,
            every_tenant=args.every_tenant,
            concurrency=args.concurrency,
            rate=rate,
            per=per,
            set_by=args.by,
        )
    who = (
        "each tenant"
        if rule.every_tenant
        else (f"tenant {rule.tenant_id}" if rule.tenant_id is not None else "every tenant together")
    )
    where = f"queue {rule.queue}" if rule.queue is not None else "every queue"
    bounds = []
    if rule.concurrency is not None:
        bounds.append(f"at most {rule.concurrency} running")
    if rule.rate is not None and rule.per is not None:
        bounds.append(f"at most {rule.rate} started per {render.span(rule.per.total_seconds())}")
    return _answer(args, {"limit": rule}, f"limit for {who} in {where}: {', '.join(bounds)}")


def _cmd_limits_clear(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        removed = client.clear_limit(
            queue=args.queue, tenant_id=args.tenant, every_tenant=args.every_tenant, kind=args.kind
        )
    document = {
        "queue": args.queue,
        "tenant_id": args.tenant,
        "every_tenant": args.every_tenant,
        "kind": args.kind,
        "removed": removed,
    }
    return _answer(args, document, "removed" if removed else "no such limit: nothing changed")


def _cmd_jobs_types(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        types = client.job_types()
    return _answer(args, {"job_types": types}, _job_types_text(types))


def _cmd_jobs_forget_type(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        forgotten = client.forget_job_type(args.name)
    human = (
        f"forgot job type {args.name}: its later enqueues take the built-in defaults"
        if forgotten
        else f"job type {args.name} was not in the catalogue"
    )
    return _answer(args, {"job_type": args.name, "forgotten": forgotten}, human)


def _cmd_tasks_list(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        tasks = client.run(calls.task_fires())
    return _answer(args, {"tasks": tasks}, _tasks_text(tasks))


def _cmd_tasks_pause(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        changed = client.run(calls.pause_task(args.task))
    return _switched(args, "task", args.task, "paused", changed)


def _cmd_tasks_resume(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        changed = client.run(calls.resume_task(args.task))
    return _switched(args, "task", args.task, "resumed", changed)


# -- workers --------------------------------------------------------------------------------


def _worker_document(worker: WorkerRecord, now: datetime) -> dict[str, Any]:
    # this machine's clock against the database's: a skew shows here, so never below zero
    age = max((now - worker.heartbeat_at).total_seconds(), 0.0)
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "queues": worker.queues,
        "slots": worker.slots,
        "in_flight": worker.in_flight,
        "in_flight_count": worker.in_flight_count,
        "started_at": worker.started_at,
        "heartbeat_at": worker.heartbeat_at,
        "heartbeat_age_seconds": age,
        "expires_at": worker.expires_at,
        "draining_at": worker.draining_at,
    }


def _workers_text(workers: Sequence[dict[str, Any]]) -> str:
    if not workers:
        return "no live worker"
    headers = ["ID", "HOST", "PID", "QUEUES", "SLOTS", "IN FLIGHT", "HEARTBEAT", "DRAINING SINCE"]
    rows = [
        [
            worker["id"],
            worker["host"],
            str(worker["pid"]),
            render.text(worker["queues"]),
            str(worker["slots"]),
            str(worker["in_flight_count"]),
            f"{render.span(worker['heartbeat_age_seconds'])} ago",
            render.when(worker["draining_at"]),
        ]
        for worker in workers
    ]
    return render.table(headers, rows)


def _cmd_workers(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        records = client.workers()
    now = datetime.now(UTC)
    workers = [_worker_document(worker, now) for worker in records]
    return _answer(args, {"workers": workers}, _workers_text(workers))


# -- counters -------------------------------------------------------------------------------


def _since(args: argparse.Namespace) -> datetime:
    if args.since is not None:
        return instant(args.since, "--since")
    minutes = DEFAULT_COUNTER_MINUTES if args.minutes is None else args.minutes
    if minutes <= 0:
        raise ArgumentInvalid(f"--minutes must be more than 0, got {minutes:g}")
    return datetime.now(UTC) - timedelta(minutes=minutes)


def _average_ms(counted: CounterTotal | CounterRow) -> float | None:
    # duration_ms sums every settled attempt, whatever its outcome
    attempts = counted.done + counted.retried + counted.failed + counted.dead
    return None if attempts == 0 else round(counted.duration_ms / attempts, 1)


def _counted(counted: CounterTotal | CounterRow) -> dict[str, Any]:
    return {
        "done": counted.done,
        "retried": counted.retried,
        "failed": counted.failed,
        "dead": counted.dead,
        "duration_ms": counted.duration_ms,
        "avg_duration_ms": _average_ms(counted),
    }


def _counted_cells(counted: dict[str, Any]) -> list[str]:
    tallies = [str(counted[key]) for key in ("done", "retried", "failed", "dead")]
    average = counted["avg_duration_ms"]
    return [*tallies, render.NOTHING if average is None else f"{average:g}ms"]


def _counters_text(since: datetime, key: str, rows: Sequence[dict[str, Any]]) -> str:
    title = f"since {render.when(since)}"
    if not rows:
        return f"{title}: no attempt settled"
    tallies = ["DONE", "RETRIED", "FAILED", "DEAD", "AVG"]
    if key == "totals":
        table = render.table(
            ["NAME", *tallies], [[row["name"], *_counted_cells(row)] for row in rows]
        )
    else:
        table = render.table(
            ["BUCKET", "TIER", "NAME", *tallies],
            [
                [render.when(row["bucket"]), row["tier"], row["name"], *_counted_cells(row)]
                for row in rows
            ],
        )
    return f"{title}\n{table}"


def _cmd_counters(args: argparse.Namespace) -> int:
    since = _since(args)
    with _connect(args) as client:
        if args.buckets:
            buckets = client.counters(args.name, since=since)
            key = "buckets"
            rows = [
                {"name": row.name, "tier": row.tier, "bucket": row.bucket, **_counted(row)}
                for row in buckets
            ]
        else:
            totals = client.counter_totals(since=since)
            key = "totals"
            rows = [
                {"name": total.name, **_counted(total)}
                for total in totals
                if args.name is None or total.name == args.name
            ]
    return _answer(args, {"since": since, key: rows}, _counters_text(since, key, rows))


# -- registration ---------------------------------------------------------------------------


def _leaf(
    subcommands: Subcommands, name: str, about: str, run: Run, with_database: WithDatabase
) -> argparse.ArgumentParser:
    command = with_database(subcommands.add_parser(name, help=about, description=about))
    command.add_argument("--json", action="store_true", help="print one JSON document")
    command.set_defaults(run=_speaking_commands(run))
    return command


def _nested(subcommands: Subcommands, name: str, about: str, run: Run) -> argparse.ArgumentParser:
    """A subcommand under a command that runs on its own (`queues`, `tasks`).

    Its options default to SUPPRESS: argparse copies a subcommand's defaults over its parent's
    values, so `queues --json depth` would otherwise lose the --json.
    """
    command = subcommands.add_parser(name, help=about, description=about)
    command.add_argument("--database-url", default=argparse.SUPPRESS, help="default: $DATABASE_URL")
    command.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document"
    )
    command.set_defaults(run=_speaking_commands(run))
    return command


def _add_job_filters(command: argparse.ArgumentParser) -> None:
    command.add_argument("--queue", help="only this queue")
    command.add_argument("--name", help="only jobs of this name")
    command.add_argument("--tenant", help="only this tenant id")


def _add_jobs_list(actions: Subcommands, with_database: WithDatabase) -> None:
    listing = _leaf(
        actions, "list", "one page of jobs, newest first", _cmd_jobs_list, with_database
    )
    _add_job_filters(listing)
    listing.add_argument(
        "--state", help="ready, delayed, running, suspended, done, failed, dead or cancelled"
    )
    listing.add_argument("--id-prefix", help="the start of the id, any case")
    listing.add_argument("--key", help="only the jobs of this idempotency key")
    listing.add_argument(
        "--run", dest="run_id", type=_job_id, help="only the jobs of this run (its run id)"
    )
    listing.add_argument("--created-from", help="ISO 8601 instant with a zone (inclusive)")
    listing.add_argument("--created-to", help="ISO 8601 instant with a zone (inclusive)")
    listing.add_argument(
        "--limit", type=int, default=DEFAULT_PAGE, help=f"page size, 1 to 200 ({DEFAULT_PAGE})"
    )
    listing.add_argument("--after", type=_job_id, help="older rows: the last id of a page")
    listing.add_argument("--before", type=_job_id, help="newer rows: the first id of a page")


def _add_jobs_actions(actions: Subcommands, with_database: WithDatabase) -> None:
    show = _leaf(actions, "show", "one job in full", _cmd_jobs_show, with_database)
    show.add_argument("id", type=_job_id, help="the job's id")
    show.add_argument("--app", help="module:registry declaring the job, for its retries ahead")
    show.add_argument(
        "--environment",
        help="for a backfill's job: the environment its state is read for (default: "
        "$DURAJOBS_ENVIRONMENT), as `durajobs backfill list --environment`",
    )

    cancel = _leaf(actions, "cancel", "cancel a live job", _cmd_jobs_cancel, with_database)
    cancel.add_argument("id", type=_job_id, help="the job's id")
    cancel.add_argument("--reason", help="kept in the job's last error")
    cancel.add_argument(
        "--children",
        action="store_true",
        help="also cancel every live job its steps enqueued (and theirs)",
    )

    requeue = _leaf(
        actions, "requeue", "run a finished job again", _cmd_jobs_requeue, with_database
    )
    requeue.add_argument("id", type=_job_id, help="the job's id")
    requeue.add_argument("--from-step", help="run this step and every later one again")

    remove = _leaf(actions, "remove", "delete a job not running", _cmd_jobs_remove, with_database)
    remove.add_argument("id", type=_job_id, help="the job's id")

    about_drain = "end a live job as done, counted nowhere (its work was done by hand)"
    drain = _leaf(actions, "drain", about_drain, _cmd_jobs_drain, with_database)
    drain.add_argument("id", type=_job_id, help="the job's id")

    about_promote = "make a delayed (or backing-off) job due now"
    promote = _leaf(actions, "promote", about_promote, _cmd_jobs_promote, with_database)
    promote.add_argument("id", type=_job_id, help="the job's id")


def _add_jobs_bulk(actions: Subcommands, with_database: WithDatabase) -> None:
    about = "requeue, remove or promote the jobs of one state, 1,000 a call"
    bulk = _leaf(actions, "bulk", about, _cmd_jobs_bulk, with_database)
    bulk.add_argument("action", choices=sorted(_BULK), help="what to do to them")
    bulk.add_argument("--state", required=True, help="the state of the jobs to act on")
    _add_job_filters(bulk)
    bulk.add_argument(
        "--until-done", action="store_true", help="call again while a call moves rows"
    )


def _add_jobs_purge(actions: Subcommands, with_database: WithDatabase) -> None:
    about = "delete what outlived its retention window, a batch a call"
    purge = _leaf(actions, "purge", about, _cmd_jobs_purge, with_database)
    add_retention_options(purge, sweeping=False)
    purge.add_argument(
        "--until-done", action="store_true", help="call again while a call fills a batch"
    )


def _add_queues(commands: Subcommands, with_database: WithDatabase) -> None:
    about = "what each queue holds; pause, resume, depth"
    queues = _leaf(commands, "queues", about, _cmd_queues_list, with_database)
    actions = queues.add_subparsers(dest="queues_command")  # bare `queues` lists them
    _nested(actions, "list", "what each queue holds (the default)", _cmd_queues_list)
    pause = _nested(actions, "pause", "stop handing out a queue's jobs", _cmd_queues_pause)
    pause.add_argument("queue")
    pause.add_argument("--by", help="who paused it, for the record")
    resume = _nested(actions, "resume", "hand out a queue's jobs again", _cmd_queues_resume)
    resume.add_argument("queue")
    about_depth = "the autoscaler's number: running + due - held by draining workers"
    depth = _nested(actions, "depth", about_depth, _cmd_queues_depth)
    depth.add_argument("queues", nargs="*", help="these queues, in order (default: every one)")


def _add_tasks(commands: Subcommands, with_database: WithDatabase) -> None:
    about = "cron tasks: watermark, last fire, pause"
    tasks = _leaf(commands, "tasks", about, _cmd_tasks_list, with_database)
    actions = tasks.add_subparsers(dest="tasks_command")  # bare `tasks` lists them
    _nested(actions, "list", "every task (the default)", _cmd_tasks_list)
    pause = _nested(actions, "pause", "let a task's occurrences pass unfired", _cmd_tasks_pause)
    pause.add_argument("task")
    resume = _nested(actions, "resume", "fire a task's occurrences again", _cmd_tasks_resume)
    resume.add_argument("task")


def _add_counters(commands: Subcommands, with_database: WithDatabase) -> None:
    about = "attempts settled per job name: done, retried, failed, dead, duration"
    counters = _leaf(commands, "counters", about, _cmd_counters, with_database)
    counters.add_argument("--name", help="only this job name")
    window = counters.add_mutually_exclusive_group()
    window.add_argument("--since", help="ISO 8601 instant with a zone")
    window.add_argument(
        "--minutes", type=float, help=f"the last M minutes ({DEFAULT_COUNTER_MINUTES:g})"
    )
    counters.add_argument("--buckets", action="store_true", help="every bucket, not totals")


def add_operator_commands(commands: Subcommands, with_database: WithDatabase) -> None:
    """Register jobs, queues, tasks, workers and counters on the `durajobs` parser."""
    jobs = commands.add_parser("jobs", help="list, inspect and act on jobs")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)
    _add_jobs_list(actions, with_database)
    _add_jobs_actions(actions, with_database)
    _add_jobs_bulk(actions, with_database)
    _add_jobs_purge(actions, with_database)
    _leaf(
        actions,
        "types",
        "the job catalogue: each declared name's queue, attempts, priority and tenant rule",
        _cmd_jobs_types,
        with_database,
    )
    forget = _leaf(
        actions,
        "forget-type",
        "remove a name no deploy declares any more from the catalogue",
        _cmd_jobs_forget_type,
        with_database,
    )
    forget.add_argument("name", help="the job name")
    _add_queues(commands, with_database)
    _add_tasks(commands, with_database)
    _leaf(commands, "workers", "the live workers", _cmd_workers, with_database)
    _add_counters(commands, with_database)
    limits = commands.add_parser("limits", help="the limits, what they hold, and setting them")
    limit_actions = limits.add_subparsers(dest="limits_command", required=True)
    show = _leaf(
        limit_actions,
        "show",
        "each limit (a job's, or set): what runs, waits and is held back, the holders",
        _cmd_limits_show,
        with_database,
    )
    show.add_argument("--name", help="only this job's declared limit")
    set_ = _leaf(
        limit_actions,
        "set",
        "set a fleet-wide limit for a queue, a tenant, each tenant or the fleet",
        _cmd_limits_set,
        with_database,
    )
    _add_limit_selector(set_)
    set_.add_argument("--concurrency", type=int, help="at most N attempts running at once")
    set_.add_argument("--rate", help="at most K attempts started per window, as K/WINDOW (100/1m)")
    set_.add_argument("--by", help="who set it, for the record")
    clear = _leaf(
        limit_actions,
        "clear",
        "remove a limit set with limits set",
        _cmd_limits_clear,
        with_database,
    )
    _add_limit_selector(clear)
    clear.add_argument(
        "--kind",
        choices=["concurrency", "rate", "all"],
        default="all",
        help="which of the selector's limits goes (all)",
    )


def _add_limit_selector(parser: argparse.ArgumentParser) -> None:
    """--queue and --tenant | --every-tenant: which rows a set limit counts."""
    parser.add_argument("--queue", help="only this queue (default: every queue together)")
    tenants = parser.add_mutually_exclusive_group()
    tenants.add_argument("--tenant", help="only this tenant")
    tenants.add_argument(
        "--every-tenant", action="store_true", help="each tenant apart (a --tenant rule overrides)"
    )
