"""The `durajobs` command line: `durajobs.cli.commands` wires it, the other modules serve it."""

from __future__ import annotations

from durajobs.cli.commands import main

__all__ = ["main"]
