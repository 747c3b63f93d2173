"""The dashboard's guards: response headers, the auth token, and the CSRF token of its forms.

- Every response carries a Content-Security-Policy that allows only the dashboard's own files
  (no inline script or style, no other origin), and refuses to be framed.
- With an auth token, every request but the login form needs the token: as
  `Authorization: Bearer <token>`, or the cookie the login form sets (an HMAC of the token, so
  the cookie is not the token).
- Each browser gets a random CSRF cookie; every form carries an HMAC of it under the
  dashboard's secret, and a POST whose field is not that HMAC, or whose Origin is another
  site's (or `null`), is refused: a cookie planted by a sibling origin cannot pass, since it
  cannot compute the HMAC.
- Served without a token (the loopback default), only a Host of the loopback is answered: a
  site whose name was re-bound to 127.0.0.1 (DNS rebinding) sends its own name as the Host.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "durajobs_csrf"
CSRF_FIELD = "csrf_token"
AUTH_COOKIE = "durajobs_auth"
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

Auth = Callable[[Request], bool | Awaitable[bool]]


def new_csrf_nonce() -> str:
    return secrets.token_urlsafe(32)


def csrf_nonce(request: Request) -> str | None:
    return request.cookies.get(CSRF_COOKIE)


def form_token(secret: bytes, nonce: str) -> str:
    """What a form carries for the browser whose CSRF cookie holds `nonce`."""
    return hmac.new(secret, nonce.encode(), hashlib.sha256).hexdigest()


def csrf_ok(request: Request, submitted: object, secret: bytes, hosts: Sequence[str]) -> bool:
    """The form's token is the HMAC of this browser's cookie, and the request comes from one
    of `hosts` (or, with none given, from the host it was sent to)."""
    nonce = csrf_nonce(request)
    if not nonce or not isinstance(submitted, str):
        return False
    if not hmac.compare_digest(form_token(secret, nonce), submitted):
        return False
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin is None:
        return True  # a same-origin form post from a browser that sends neither
    stated = urlsplit(origin).netloc
    if not stated:
        return False  # `null`: a sandboxed frame or a redirect chain
    allowed = hosts or [request.headers.get("host", request.url.netloc)]
    return host_name(stated) in {host_name(host) for host in allowed}


def host_name(host: str) -> str:
    """A Host header's name without its port ([::1]:8080 -> ::1)."""
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_ok(request: Request, hosts: Sequence[str]) -> bool:
    if not hosts:
        return True
    return host_name(request.headers.get("host", "")) in {host_name(h) for h in hosts}


def auth_cookie_value(token: str) -> str:
    """What the login cookie holds: an HMAC of the token, never the token."""
    return hmac.new(token.encode(), b"durajobs-dashboard-session", hashlib.sha256).hexdigest()


def token_ok(request: Request, token: str) -> bool:
    stated = request.headers.get("authorization", "")
    if stated.lower().startswith("bearer ") and hmac.compare_digest(
        stated[7:].strip().encode(), token.encode()
    ):
        return True
    cookie = request.cookies.get(AUTH_COOKIE, "")
    return hmac.compare_digest(cookie.encode(), auth_cookie_value(token).encode())


def token_ok_value(submitted: str, token: str) -> bool:
    """The login form's token is the dashboard's."""
    return hmac.compare_digest(submitted.encode(), token.encode())


class SecurityHeaders:
    """ASGI middleware: the security headers on every response, the static files and the
    framework's own 404 and 405 answers included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, sending)
