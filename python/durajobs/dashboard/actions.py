"""The dashboard's actions: POSTs through the operator functions, then back to the page.

Each is refused by a read-only dashboard and without the form's CSRF token (app.guarded); a
refusal of the function itself (a job that is not dead any more, say) is shown with its code
and fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from starlette.requests import Request
from starlette.responses import Response

from durajobs._db import calls
from durajobs.dashboard.views import BULK_ACTIONS, BULK_STATES, bulk_filters
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

MOST_BULK_CALLS = 100  # a bulk action moves at most 100,000 rows a click (1,000 a call)


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


async def queue(dashboard: Dashboard, request: Request) -> Response:
    name, action = request.path_params["name"], request.path_params["action"]
    if action == "pause":
        await dashboard.run(calls.pause_queue(name, paused_by="dashboard"))
    elif action == "resume":
        await dashboard.run(calls.resume_queue(name))
    else:
        raise ArgumentInvalid(f"no queue action {action!r}", detail={"field": "action"})
    return dashboard.back(request, f"/queues/{name}", f"queue {name} {action}d")


async def task(dashboard: Dashboard, request: Request) -> Response:
    name, action = request.path_params["name"], request.path_params["action"]
    if action == "pause":
        await dashboard.run(calls.pause_task(name))
    elif action == "resume":
        await dashboard.run(calls.resume_task(name))
    else:
        raise ArgumentInvalid(f"no task action {action!r}", detail={"field": "action"})
    return dashboard.back(request, "/tasks", f"task {name} {action}d")


async def bulk(dashboard: Dashboard, request: Request) -> Response:
    """A bulk action over the filter its confirmation showed, 1,000 rows a call until none
    is left (or the click's ceiling)."""
    action = request.path_params["action"]
    if action not in BULK_ACTIONS:
        raise ArgumentInvalid(f"no bulk action {action!r}", detail={"field": "action"})
    filters = bulk_filters(request)
    state = filters["state"]
    if state is None or state not in BULK_STATES[action]:
        raise ArgumentInvalid(
            f"{action} takes jobs in {', '.join(BULK_STATES[action])}", detail={"field": "state"}
        )
    builder = {
        "requeue": calls.requeue_many,
        "remove": calls.remove_many,
        "promote": calls.promote_many,
    }[action]
    moved = 0
    for _ in range(MOST_BULK_CALLS):
        answer = await dashboard.run(
            builder(
                state, queue=filters["queue"], name=filters["name"], tenant_id=filters["tenant_id"]
            )
        )
        moved += answer.affected
        if answer.remaining == 0 or answer.affected == 0:
            break
    return dashboard.back(request, "/jobs", f"{BULK_ACTIONS[action]} {moved} {state} jobs")
