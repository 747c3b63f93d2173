"""The operator dashboard: a small web UI over the SQL operator functions.

`durajobs dashboard` serves it; `durajobs.dashboard.app(database_url=...)` answers the ASGI app
to mount inside an application's own (behind its auth). It reads and acts only through the
`jobs` functions an operator role may call, renders every page on the server (Jinja2, every
asset inside the package: no CDN, a strict Content-Security-Policy), and guards each action with
a CSRF token. Needs the `dashboard` extra: `pip install 'durajobs[dashboard]'`.
"""

from __future__ import annotations

from durajobs.dashboard.app import app

__all__ = ["app"]
