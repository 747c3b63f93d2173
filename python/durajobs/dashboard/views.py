"""The dashboard's pages: each reads through the operator functions and renders a template."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from starlette.requests import Request
from starlette.responses import Response

from durajobs._db import calls
from durajobs._values.states import JobState
from durajobs.dashboard.charts import Bucket, throughput
from durajobs.declare.backfill import current_environment
from durajobs.display.inspection import job_detail
from durajobs.errors import ArgumentInvalid, JobNotFound
from durajobs.services.backfills import report_calls, report_from

if TYPE_CHECKING:
    from durajobs.dashboard.site import Dashboard

PAGE_SIZE = 50
LIST_MOST = 200  # jobs.list_jobs' largest page
MOST_COUNTED = 10_000  # a confirmation counts this many rows at most, then says "more than"
CHART_MINUTES = 60
STATES = [state.value for state in JobState]
BULK_ACTIONS = {"requeue": "requeued", "remove": "removed", "promote": "promoted"}
# the states each bulk action takes (jobs.requeue_many and the others refuse any other)
BULK_STATES = {
    "requeue": ("dead", "failed", "cancelled", "done"),
    "remove": ("dead", "failed", "cancelled", "done", "ready", "delayed", "suspended"),
    "promote": ("delayed", "ready"),
}


async def overview(dashboard: Dashboard, request: Request) -> Response:
    queues = await dashboard.run(calls.queue_stats())
    since = datetime.now(UTC) - timedelta(minutes=CHART_MINUTES)
    rows = await dashboard.run(calls.counters(since=since))
    return dashboard.page(
        request,
        "overview.html",
        title="Overview",
        queues=queues,
        chart=throughput(_minutes(rows, since)),
        totals=_totals(rows),
    )


def _minutes(rows: list[Any], since: datetime) -> list[Bucket]:
    """Every minute of the window, its names summed (a minute with nothing is an empty bar)."""
    summed: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        if row.tier != "1m":
            continue
        for series in ("done", "retried", "failed", "dead"):
            summed[row.bucket][series] += getattr(row, series)
    start = since.replace(second=0, microsecond=0)
    return [
        Bucket(at=at, **summed.get(at, {}))
        for at in (start + timedelta(minutes=i) for i in range(CHART_MINUTES + 1))
    ]


def _totals(rows: list[Any]) -> dict[str, int]:
    return {
        series: sum(getattr(row, series) for row in rows if row.tier == "1m")
        for series in ("done", "retried", "failed", "dead")
    }


async def queue(dashboard: Dashboard, request: Request) -> Response:
    name = request.path_params["name"]
    found = await dashboard.run(calls.queue_stats([name]))
    stats = found[0] if found else None
    recent = await dashboard.run(calls.list_jobs(queue=name, page_size=PAGE_SIZE))
    return dashboard.page(
        request, "queue.html", title=f"Queue {name}", name=name, stats=stats, recent=recent
    )


def _filters(request: Request) -> dict[str, str | None]:
    query = request.query_params
    chosen = {key: (query.get(key) or "").strip() or None for key in ("state", "queue", "name")}
    chosen["tenant_id"] = (query.get("tenant") or "").strip() or None
    chosen["id_prefix"] = (query.get("id") or "").strip().lower() or None
    chosen["idempotency_key"] = (query.get("key") or "").strip() or None
    if chosen["state"] is not None and chosen["state"] not in STATES:
        raise ArgumentInvalid(
            f"state must be one of {', '.join(STATES)}, got {chosen['state']!r}",
            detail={"field": "state"},
        )
    return chosen


def _cursor(request: Request, key: str) -> UUID | None:
    text = request.query_params.get(key)
    if not text:
        return None
    try:
        return UUID(text)
    except ValueError:
        raise ArgumentInvalid(f"{key} must be a job id", detail={"field": key}) from None


async def jobs(dashboard: Dashboard, request: Request) -> Response:
    return await _listing(dashboard, request, title="Jobs", fixed_state=None)


async def dead(dashboard: Dashboard, request: Request) -> Response:
    return await _listing(dashboard, request, title="Dead letters", fixed_state="dead")


async def _listing(
    dashboard: Dashboard, request: Request, *, title: str, fixed_state: str | None
) -> Response:
    filters = _filters(request)
    if fixed_state is not None:
        filters["state"] = fixed_state
    after, before = _cursor(request, "after"), _cursor(request, "before")
    page = await dashboard.run(
        calls.list_jobs(
            state=filters["state"],
            queue=filters["queue"],
            name=filters["name"],
            tenant_id=filters["tenant_id"],
            id_prefix=filters["id_prefix"],
            idempotency_key=filters["idempotency_key"],
            page_size=PAGE_SIZE,
            after=after,
            before=before,
        )
    )
    kept = {
        "state": filters["state"] if fixed_state is None else None,
        "queue": filters["queue"],
        "name": filters["name"],
        "tenant": filters["tenant_id"],
        "id": filters["id_prefix"],
        "key": filters["idempotency_key"],
    }
    query = {key: value for key, value in kept.items() if value}
    return dashboard.page(
        request,
        "jobs.html",
        title=title,
        page=page,
        filters=kept,
        states=STATES,
        fixed_state=fixed_state,
        query=query,
        newer=page[0].id if page and (after or before) else None,
        older=page[-1].id if len(page) == PAGE_SIZE else None,
    )


async def job(dashboard: Dashboard, request: Request) -> Response:
    text = request.path_params["id"]
    try:
        id = UUID(text)
    except ValueError:
        raise JobNotFound(f"no job has the id {text!r}", detail={"id": text}) from None
    detail = job_detail(await dashboard.run(calls.inspect_job(id)), dashboard.registry)
    run = await dashboard.run(calls.list_jobs(run_id=UUID(str(detail.job["run_id"])), page_size=50))
    return dashboard.page(
        request,
        "job.html",
        title=f"Job {detail.job['name']}",
        detail=detail,
        job=detail.job,
        steps=detail.steps,
        input_json=json.dumps(detail.job.get("input"), indent=2, ensure_ascii=False),
        result_json=(
            None
            if detail.job.get("result") is None
            else json.dumps(detail.job["result"], indent=2, ensure_ascii=False)
        ),
        trace_id=_trace_id(detail.job.get("traceparent")),
        run=[row for row in run if row.id != id],
    )


def _trace_id(traceparent: object) -> str | None:
    """The trace id of a W3C traceparent (version-traceid-spanid-flags)."""
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 else None


async def tasks(dashboard: Dashboard, request: Request) -> Response:
    """Each task the scheduler armed; with a registry, each declared task's schedule and next
    fire too (the database holds no schedule: the declaration does)."""
    rows = await dashboard.run(calls.task_fires())
    registry = dashboard.registry
    declared = {task.name: task for task in registry.tasks()} if registry is not None else {}
    schedules = {
        row.task: (declared[row.task].cron, str(declared[row.task].tz), _next_fire(row, declared))
        for row in rows
        if row.task in declared
    }
    return dashboard.page(
        request,
        "tasks.html",
        title="Cron tasks",
        tasks=rows,
        schedules=schedules,
        known=registry is not None,
    )


def _next_fire(row: Any, declared: dict[str, Any]) -> datetime | None:
    """The first occurrence after the watermark (what the scheduler fires next); None while
    the task is paused."""
    if row.paused:
        return None
    task = declared[row.task]
    after = max(row.watermark, datetime.now(UTC) - timedelta(days=366))
    fire: datetime = task.next_run(after)
    return fire


async def workers(dashboard: Dashboard, request: Request) -> Response:
    rows = await dashboard.run(calls.workers_live())
    return dashboard.page(request, "workers.html", title="Workers", workers=rows)


async def backfills(dashboard: Dashboard, request: Request) -> Response:
    """The backfills' one projection (services.backfills), as `durajobs backfill list` shows
    it: needs the registry that declares them."""
    registry = dashboard.registry
    environment = (request.query_params.get("environment") or "").strip() or current_environment()
    report = None
    if registry is not None:
        declared = registry.backfills()
        passes_call, listing_calls = report_calls(declared)
        listings = [await dashboard.run(call) for call in listing_calls]
        passes = await dashboard.run(passes_call)
        report = report_from(declared, environment, passes, listings)
    return dashboard.page(
        request, "backfills.html", title="Backfills", report=report, environment=environment
    )


async def webhooks(dashboard: Dashboard, request: Request) -> Response:
    """The webhook endpoints deliveries reached (the disabled first) and the newest attempts,
    of one endpoint when `?endpoint=` names it."""
    endpoint = (request.query_params.get("endpoint") or "").strip() or None
    endpoints = await dashboard.run(calls.webhook_endpoints())
    attempts = await dashboard.run(calls.webhook_attempts(endpoint_id=endpoint, max_rows=50))
    return dashboard.page(
        request,
        "webhooks.html",
        title="Webhook endpoints",
        endpoints=endpoints,
        attempts=attempts,
        endpoint=endpoint,
    )


async def limits(dashboard: Dashboard, request: Request) -> Response:
    rows = await dashboard.run(calls.limits())
    return dashboard.page(request, "limits.html", title="Limits", limits=rows)


async def bulk_confirm(dashboard: Dashboard, request: Request) -> Response:
    """What a bulk action over a filter would touch, counted now, before it is taken: the
    action then touches at most that many, of the rows created by now."""
    if dashboard.read_only:
        raise ArgumentInvalid("this dashboard is read-only", detail={"field": "action"})
    action = request.path_params["action"]
    if action not in BULK_ACTIONS:
        raise ArgumentInvalid(f"no bulk action {action!r}", detail={"field": "action"})
    filters = bulk_filters(request)
    state = filters["state"]
    if state not in BULK_STATES[action]:
        raise ArgumentInvalid(
            f"{action} takes jobs in {', '.join(BULK_STATES[action])}; pick one of them",
            detail={"field": "state"},
        )
    snapshot = datetime.now(UTC)
    count = await count_matching(dashboard, filters, snapshot)
    return dashboard.page(
        request,
        "confirm.html",
        title=f"{action.capitalize()} {state} jobs",
        action=action,
        filters=filters,
        count=count,
        most=MOST_COUNTED,
        snapshot=snapshot.isoformat(),
    )


def bulk_filters(request: Request) -> dict[str, str | None]:
    """A bulk action's filter: state, queue, name and tenant, as the _many functions take;
    an id prefix or a key would make the count promise rows the action would not touch."""
    filters = _filters(request)
    if filters["id_prefix"] or filters["idempotency_key"]:
        raise ArgumentInvalid(
            "a bulk action filters by state, queue, name and tenant only",
            detail={"field": "id, key"},
        )
    return filters


async def count_matching(
    dashboard: Dashboard, filters: dict[str, str | None], snapshot: datetime
) -> int:
    """How many jobs of `filters` created by `snapshot` a bulk action would touch, counted
    page by page through jobs.list_jobs (the operator's own listing), at most MOST_COUNTED."""
    total, after = 0, None
    while total < MOST_COUNTED:
        page = await dashboard.run(
            calls.list_jobs(
                state=filters["state"],
                queue=filters["queue"],
                name=filters["name"],
                tenant_id=filters["tenant_id"],
                created_to=snapshot,
                page_size=LIST_MOST,
                after=after,
            )
        )
        total += len(page)
        if len(page) < LIST_MOST:
            break
        after = page[-1].id
    return min(total, MOST_COUNTED)
