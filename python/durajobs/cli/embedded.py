"""An embedded Postgres for the demo, when no DATABASE_URL is given.

Uses pgserver (pip install 'durajobs[embedded]'), which ships Postgres binaries in its wheel and
starts a private cluster in well under a second. Not for production: a real deployment points
DATABASE_URL at its own Postgres.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from durajobs.errors import EmbeddedUnavailable

# initdb refuses root, so pgserver run as root first makes a system user "pgserver" with useradd,
# which lives in /usr/sbin: a root shell whose PATH leaves that out cannot start the server.
_MISSING_TOOL_FIX = (
    "put /usr/sbin and /sbin on PATH (as root, pgserver creates its system user with useradd), "
    "or set DATABASE_URL to a Postgres you run"
)


@contextmanager
def embedded_postgres() -> Iterator[str]:
    """Start a throwaway Postgres in a temporary folder; answer its URL; remove it after."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI): harmless here
        warnings.simplefilter("ignore")
        try:
            import pgserver
        except ImportError as missing:
            raise EmbeddedUnavailable("the embedded Postgres needs pgserver") from missing
    with tempfile.TemporaryDirectory(prefix="durajobs-embedded-") as folder:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                server = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
            except FileNotFoundError as missing:
                raise EmbeddedUnavailable(
                    f"the embedded Postgres could not start: {missing.filename} is not on PATH",
                    hint=_MISSING_TOOL_FIX,
                ) from missing
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()
