"""What every `durajobs` command shares: the database URL, instants and the --app registry.

Its own module, so the operator commands import it without importing `durajobs.cli`: under
`python -m durajobs.cli` that import would load the command line a second time.
"""

from __future__ import annotations

import importlib
import os
import sys
from datetime import datetime

from durajobs.declarations import Registry
from durajobs.errors import ArgumentInvalid, DurajobsError


class DatabaseUrlMissing(DurajobsError):
    code = "X_DATABASE_URL_MISSING"
    fix = "pass --database-url postgresql://... or export DATABASE_URL"


def database_url(given: str | None) -> str:
    url = given or os.environ.get("DATABASE_URL")
    if not url:
        raise DatabaseUrlMissing("no database to talk to")
    return url


def instant(text: str, option: str) -> datetime:
    """An ISO 8601 instant with a zone, given as `option` on the command line."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ArgumentInvalid(f"{option} is not an ISO 8601 instant: {text!r}") from None
    if parsed.tzinfo is None:
        raise ArgumentInvalid(f"{option} needs a time zone, e.g. {text}+00:00")
    return parsed


def load_registry(spec: str) -> Registry:
    """The Registry a `module:attribute` spec names (the current directory is importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ArgumentInvalid(f"--app must be module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    registry = getattr(module, attribute, None)
    if not isinstance(registry, Registry):
        raise ArgumentInvalid(f"{spec} is not a durajobs Registry")
    return registry
