"""The dashboard's actions: POSTs through the operator functions, then back to the page.

Each is refused by a read-only dashboard and without the form's CSRF token (app.guarded); a
refusal of the function itself (a job that is not dead any more, say) is shown with its code
and fix.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from starlette.requests import Request
from starlette.responses import Response

from durajobs._db import calls
from durajobs.dashboard.views import (
    BULK_ACTIONS,
    BULK_STATES,
    LIST_MOST,
    MOST_COUNTED,
    bulk_filters,
)
from durajobs.errors import (
    ArgumentInvalid,
    DurajobsError,
    JobNotCancellable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
)

if TYPE_CHECKING:
    from durajobs.dashboard.site import Dashboard


async def job(dashboard: Dashboard, request: Request) -> Response:
    text, action = request.path_params["id"], request.path_params["action"]
    try:
        id = UUID(text)
    except ValueError:
        raise JobNotFound(f"no job has the id {text!r}", detail={"id": text}) from None
    form = await request.form()
    if action == "requeue":
        step = form.get("from_step")
        from_step = step if isinstance(step, str) and step else None
        done = await dashboard.run(calls.requeue(id, from_step=from_step))
        refusal: type[DurajobsError] = JobNotRequeueable
    elif action == "cancel":
        reason = form.get("reason")
        done = await dashboard.run(
            calls.cancel(id, reason=reason if isinstance(reason, str) and reason else None)
        )
        refusal = JobNotCancellable
    elif action == "remove":
        done = await dashboard.run(calls.remove(id))
        refusal = JobNotRemovable
    elif action == "promote":
        done = await dashboard.run(calls.promote(id))
        refusal = JobNotPromotable
    else:
        raise ArgumentInvalid(f"no job action {action!r}", detail={"field": "action"})
    if not done:
        raise refusal(f"job {id} was not {action}d", detail={"id": str(id)})
    if action == "remove":
        return dashboard.back(request, "/jobs", f"removed job {id}")
    return dashboard.back(request, f"/jobs/{id}", f"{action} done")


async def _name(request: Request) -> str:
    form = await request.form()
    name = form.get("name")
    if not isinstance(name, str) or not name:
        raise ArgumentInvalid("the form names no queue or task", detail={"field": "name"})
    return name


async def queue(dashboard: Dashboard, request: Request) -> Response:
    name, action = await _name(request), request.path_params["action"]
    if action == "pause":
        await dashboard.run(calls.pause_queue(name, paused_by="dashboard"))
    elif action == "resume":
        await dashboard.run(calls.resume_queue(name))
    else:
        raise ArgumentInvalid(f"no queue action {action!r}", detail={"field": "action"})
    return dashboard.back(request, f"/queues/{name}", f"queue {name} {action}d")


async def task(dashboard: Dashboard, request: Request) -> Response:
    name, action = await _name(request), request.path_params["action"]
    if action == "pause":
        await dashboard.run(calls.pause_task(name))
    elif action == "resume":
        await dashboard.run(calls.resume_task(name))
    else:
        raise ArgumentInvalid(f"no task action {action!r}", detail={"field": "action"})
    return dashboard.back(request, "/tasks", f"task {name} {action}d")


async def bulk(dashboard: Dashboard, request: Request) -> Response:
    """A bulk action over exactly what its confirmation counted: the rows of the filter created
    by the confirmation's instant, one operator call each, at most the count it showed. A row
    that arrived later is not touched; a row that changed meanwhile is refused by its function
    and counted as skipped."""
    action = request.path_params["action"]
    if action not in BULK_ACTIONS:
        raise ArgumentInvalid(f"no bulk action {action!r}", detail={"field": "action"})
    filters = bulk_filters(request)
    state = filters["state"]
    if state is None or state not in BULK_STATES[action]:
        raise ArgumentInvalid(
            f"{action} takes jobs in {', '.join(BULK_STATES[action])}", detail={"field": "state"}
        )
    form = await request.form()
    confirmed, snapshot = _confirmed(form.get("count"), form.get("snapshot"))
    act = {"requeue": calls.requeue, "remove": calls.remove, "promote": calls.promote}[action]
    moved = skipped = 0
    after = None
    while moved + skipped < confirmed:
        page = await dashboard.run(
            calls.list_jobs(
                state=state,
                queue=filters["queue"],
                name=filters["name"],
                tenant_id=filters["tenant_id"],
                created_to=snapshot,
                page_size=LIST_MOST,
                after=after,
            )
        )
        for row in page[: confirmed - moved - skipped]:
            try:
                done = await dashboard.run(act(row.id))
            except DurajobsError:
                done = False  # it changed since: its function refuses it
            moved, skipped = (moved + 1, skipped) if done else (moved, skipped + 1)
        if len(page) < LIST_MOST:
            break
        after = page[-1].id
    said = f"{BULK_ACTIONS[action]} {moved} {state} jobs"
    return dashboard.back(request, "/jobs", said + (f", {skipped} skipped" if skipped else ""))


def _confirmed(count: object, snapshot: object) -> tuple[int, datetime]:
    """The count and instant the confirmation showed, as its form sent them back."""
    try:
        number = int(str(count))
        instant = datetime.fromisoformat(str(snapshot))
    except ValueError:
        raise ArgumentInvalid(
            "a bulk action needs the count and instant of its confirmation: open it again",
            detail={"field": "count, snapshot"},
        ) from None
    if not 0 <= number <= MOST_COUNTED or instant.tzinfo is None:
        raise ArgumentInvalid(
            "the confirmation's count or instant is out of range", detail={"field": "count"}
        )
    return number, instant


async def webhook_endpoint(dashboard: Dashboard, request: Request) -> Response:
    """Enable a disabled endpoint again (of one webhook and tenant, as the row shown)."""
    if request.path_params["action"] != "enable":
        raise ArgumentInvalid("the only endpoint action is enable", detail={"field": "action"})
    form = await request.form()
    fields = {key: form.get(key) for key in ("endpoint_id", "webhook", "tenant_id")}
    endpoint_id, webhook, tenant = (
        value if isinstance(value, str) and value else None for value in fields.values()
    )
    if endpoint_id is None or webhook is None:
        raise ArgumentInvalid("the form names no endpoint", detail={"field": "endpoint_id"})
    enabled = await dashboard.run(
        calls.enable_webhook_endpoint(endpoint_id, webhook=webhook, tenant_id=tenant or "")
    )
    return dashboard.back(request, "/webhooks", f"enabled {enabled} endpoint {endpoint_id}")
