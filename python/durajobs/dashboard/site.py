"""One dashboard's state: where it reads, what it may do, who may see it, and how a page is
rendered and an action answered."""

from __future__ import annotations

import hashlib
import inspect
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from durajobs._db.calls import Call
from durajobs._db.database import CONNECT_TIMEOUT_SECONDS
from durajobs._db.execute import check_schema_async, execute_async
from durajobs.dashboard import security
from durajobs.declare.registry import Registry
from durajobs.display import render
from durajobs.errors import ConfigInvalid

HERE = Path(__file__).parent
T = TypeVar("T")


class Dashboard:
    """One dashboard: where it reads, what it may do, and who may see it."""

    def __init__(
        self,
        database_url: str,
        *,
        read_only: bool = False,
        auth_token: str | None = None,
        auth: security.Auth | None = None,
        registry: Registry | None = None,
        refresh_seconds: int = 5,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        if auth_token is not None and (not isinstance(auth_token, str) or len(auth_token) < 16):
            raise ConfigInvalid(
                "the dashboard's auth token must be at least 16 characters",
                detail={"field": "auth_token"},
            )
        self.database_url = database_url
        self.read_only = read_only
        self.auth_token = auth_token
        self.auth = auth
        self.registry = registry
        self.refresh_seconds = refresh_seconds
        self._checked = False  # the schema's version, checked on the first call
        # the Host names answered (empty: any, for a host application to guard)
        self.allowed_hosts = tuple(allowed_hosts)
        # what the forms' CSRF tokens are HMACs under: a replica of the dashboard shares it
        # through the token, else each process has its own (a form then posts to its server)
        self.secret = (
            hashlib.sha256(b"durajobs-dashboard-csrf:" + auth_token.encode()).digest()
            if auth_token is not None
            else secrets.token_bytes(32)
        )
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            when=render.when,
            span=render.span,
            text=render.text,
            clip=render.clip,
            # a name in a URL's path: every character but the unreserved ones escaped
            urlpart=lambda value: quote(str(value), safe=""),
        )

    async def run(self, call: Call[T]) -> T:
        """Run one operator call on a connection of its own. An operator's page makes a few
        calls: a pool would save little, and its background tasks outlive a host application
        that mounts the dashboard and never closes it."""
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
        ) as connection:
            if not self._checked:
                await check_schema_async(connection)
                self._checked = True
            return await execute_async(connection, call)

    def page(self, request: Request, template: str, **context: Any) -> Response:
        """Render `template` for `request`, with what every page needs."""
        nonce = security.csrf_nonce(request) or security.new_csrf_nonce()
        body = self.templates.get_template(template).render(
            request=request,
            csrf_field=security.CSRF_FIELD,
            csrf_token=security.form_token(self.secret, nonce),
            read_only=self.read_only,
            refresh_seconds=self.refresh_seconds,
            done=request.query_params.get("done"),
            base=request.scope.get("root_path", ""),
            **context,
        )
        response = HTMLResponse(body, status_code=context.get("status", 200))
        if security.csrf_nonce(request) != nonce:
            response.set_cookie(
                security.CSRF_COOKIE, nonce, httponly=True, samesite="strict", path="/"
            )
        return response

    def back(self, request: Request, path: str, done: str) -> Response:
        """After an action: see the page it was taken on, saying what was done."""
        quoted = quote(path, safe="/")
        target = f"{request.scope.get('root_path', '')}{quoted}?{urlencode({'done': done})}"
        return RedirectResponse(target, status_code=303)

    async def allowed(self, request: Request) -> bool:
        if not security.host_ok(request, self.allowed_hosts):
            return False
        if self.auth is not None:
            verdict = self.auth(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not verdict:
                return False
        if self.auth_token is not None:
            return security.token_ok(request, self.auth_token)
        return True
