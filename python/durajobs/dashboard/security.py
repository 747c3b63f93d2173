"""The dashboard's guards: response headers, the auth token, and the CSRF token of its forms.

- Every response carries a Content-Security-Policy that allows only the dashboard's own files
  (no inline script or style, no other origin), and refuses to be framed.
- With an auth token, every request but the login form needs the token: as
  `Authorization: Bearer <token>`, or the cookie the login form sets (an HMAC of the token, so
  the cookie is not the token).
- Each browser gets a random CSRF cookie; every form carries its value, and a POST whose field
  does not match the cookie, or whose Origin is another site's, is refused (double submit,
  with SameSite=Strict cookies).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request

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


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(request: Request) -> str | None:
    return request.cookies.get(CSRF_COOKIE)


def csrf_ok(request: Request, submitted: object) -> bool:
    """The form's token is the cookie's, and the request comes from this site."""
    cookie = csrf_token(request)
    if not cookie or not isinstance(submitted, str):
        return False
    if not hmac.compare_digest(cookie, submitted):
        return False
    origin = request.headers.get("origin") or request.headers.get("referer")
    if origin:
        stated = urlsplit(origin).netloc
        if stated and stated != request.headers.get("host", request.url.netloc):
            return False
    return True


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
