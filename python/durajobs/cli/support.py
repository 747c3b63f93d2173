"""What every `durajobs` command shares: the database URL, instants and the --app registry.

Its own module, so the operator commands import it without importing `durajobs.cli`: under
`python -m durajobs.cli` that import would load the command line a second time.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from datetime import datetime

from durajobs._values.durations import parse_duration
from durajobs.declare.registry import Registry
from durajobs.errors import ArgumentInvalid, DatabaseUrlMissing
from durajobs.services import retention as windows
from durajobs.services.retention import Retention


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


def add_retention_options(command: argparse.ArgumentParser, *, sweeping: bool) -> None:
    """The retention windows (and, for a command that sweeps on its own, --no-purge)."""
    command.add_argument(
        "--keep-done", default=windows.DONE_AFTER, help="keep done jobs this long (14d)"
    )
    command.add_argument(
        "--keep-ended",
        default=windows.ENDED_AFTER,
        help="keep failed, dead and cancelled jobs this long (90d)",
    )
    command.add_argument(
        "--keep-published",
        default=windows.PUBLISHED_AFTER,
        help="keep published outbox rows this long (7d)",
    )
    command.add_argument(
        "--purge-batch", type=int, default=windows.BATCH_SIZE, help="rows a purge call (1000)"
    )
    if sweeping:
        command.add_argument(
            "--no-purge", action="store_true", help="keep everything: no hourly retention sweep"
        )


def retention_from(args: argparse.Namespace) -> Retention | None:
    """The Retention the options ask for; None with --no-purge."""
    if getattr(args, "no_purge", False):
        return None
    # checked under the names the command line gave them
    for option, value in (
        ("--keep-done", args.keep_done),
        ("--keep-ended", args.keep_ended),
        ("--keep-published", args.keep_published),
    ):
        parse_duration(value, field=option)
    if not 1 <= args.purge_batch <= windows.MOST_BATCH_SIZE:
        raise ArgumentInvalid(
            f"--purge-batch must be between 1 and {windows.MOST_BATCH_SIZE}, got {args.purge_batch}"
        )
    return Retention.of(
        done_after=args.keep_done,
        ended_after=args.keep_ended,
        published_after=args.keep_published,
        batch_size=args.purge_batch,
    )
