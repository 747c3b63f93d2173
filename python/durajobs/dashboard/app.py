"""The dashboard's ASGI app: its routes, its guards and its database.

Pages are GETs with stable URLs (a job at `/jobs/<id>`, a queue at `/queues/<name>`); actions are
POSTs that answer with a redirect back to the page, carrying what was done in `?done=`. The
database is reached with a connection a call (site.Dashboard.run): nothing to open or close,
so a host application that mounts the dashboard (and never runs its lifespan) owes it nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from durajobs.dashboard import actions, security, views
from durajobs.dashboard.site import HERE, Dashboard
from durajobs.declare.registry import Registry
from durajobs.errors import DurajobsError

Handler = Callable[[Dashboard, Request], Awaitable[Response]]


def guarded(handler: Handler, *, action: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The handler behind the auth check (and, for an action, the read-only switch and the
    CSRF check), with the security headers on whatever it answers."""

    async def endpoint(request: Request) -> Response:
        dashboard: Dashboard = request.app.state.dashboard
        return await _answer(dashboard, request, handler, action)

    return endpoint


async def _answer(
    dashboard: Dashboard, request: Request, handler: Handler, action: bool
) -> Response:
    if not await dashboard.allowed(request):
        if dashboard.auth_token is not None and request.method == "GET":
            login = f"{request.scope.get('root_path', '')}/login"
            return RedirectResponse(login, status_code=303)
        return PlainTextResponse("not allowed", status_code=401)
    if action:
        if dashboard.read_only:
            return PlainTextResponse("this dashboard is read-only", status_code=403)
        form = await request.form()
        if not security.csrf_ok(
            request, form.get(security.CSRF_FIELD), dashboard.secret, dashboard.allowed_hosts
        ):
            return PlainTextResponse(
                "the form's CSRF token is missing or stale: reload the page and try again",
                status_code=403,
            )
    try:
        return await handler(dashboard, request)
    except DurajobsError as error:
        return dashboard.page(
            request,
            "error.html",
            title=error.code,
            error=error,
            status=404 if error.code.endswith("NOT_FOUND") else 400,
        )


async def _login(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.dashboard
    if dashboard.auth_token is None:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
    refused = False
    if request.method == "POST":
        form = await request.form()
        token = form.get("token")
        if isinstance(token, str) and security.token_ok_value(token, dashboard.auth_token):
            response = RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
            response.set_cookie(
                security.AUTH_COOKIE,
                security.auth_cookie_value(dashboard.auth_token),
                httponly=True,
                samesite="strict",
                path="/",
            )
            return response
        refused = True
    return dashboard.page(request, "login.html", title="Sign in", refused=refused)


def app(
    database_url: str,
    *,
    read_only: bool = False,
    auth_token: str | None = None,
    auth: security.Auth | None = None,
    registry: Registry | None = None,
    refresh_seconds: int = 5,
    allowed_hosts: Sequence[str] = (),
) -> ASGIApp:
    """The dashboard as an ASGI app. Mount it inside an application (`app.mount("/jobs",
    durajobs.dashboard.app(database_url=...))`) behind that application's auth, or give it
    `auth` (a function of the request answering whether it may see the dashboard) or
    `auth_token`. `read_only` refuses every action; `registry` adds each job's retries ahead
    and the backfills. `allowed_hosts` names the Host headers it answers (`durajobs dashboard`
    without a token passes the loopback's, against DNS rebinding); empty: any."""
    dashboard = Dashboard(
        database_url,
        read_only=read_only,
        auth_token=auth_token,
        auth=auth,
        registry=registry,
        refresh_seconds=refresh_seconds,
        allowed_hosts=allowed_hosts,
    )
    routes = [
        Route("/", guarded(views.overview)),
        Route("/queues/{name:path}", guarded(views.queue)),
        Route("/jobs", guarded(views.jobs)),
        Route("/jobs/{id}", guarded(views.job)),
        Route("/dead", guarded(views.dead)),
        Route("/tasks", guarded(views.tasks)),
        Route("/workers", guarded(views.workers)),
        Route("/limits", guarded(views.limits)),
        Route("/backfills", guarded(views.backfills)),
        Route("/webhooks", guarded(views.webhooks)),
        Route("/bulk/{action}", guarded(views.bulk_confirm)),
        Route("/login", _login, methods=["GET", "POST"]),
        Route("/jobs/{id}/{action}", guarded(actions.job, action=True), methods=["POST"]),
        # a queue's or task's name travels in the form: any text, `/` and `?` included
        Route("/actions/queue/{action}", guarded(actions.queue, action=True), methods=["POST"]),
        Route("/actions/task/{action}", guarded(actions.task, action=True), methods=["POST"]),
        Route("/bulk/{action}", guarded(actions.bulk, action=True), methods=["POST"]),
        Route(
            "/actions/webhook-endpoint/{action}",
            guarded(actions.webhook_endpoint, action=True),
            methods=["POST"],
        ),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    made = Starlette(routes=routes)
    made.state.dashboard = dashboard
    return security.SecurityHeaders(made)
