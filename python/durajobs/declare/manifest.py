"""The manifest of an application's declarations: every job and task `describe()`s, as one
JSON document a deploy can commit and diff (`durajobs manifest --app module:registry`).

Byte-identical across runs, machines and locales: names sort by code point (never a locale's
collation), keys sort, and nothing in it depends on the clock or the environment.
"""

from __future__ import annotations

import json
from typing import Any

from durajobs.declare.registry import Registry

MANIFEST_VERSION = 1


def manifest(registry: Registry) -> dict[str, Any]:
    """The registry's jobs and tasks, each described, in code-point order of their names."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "jobs": [job.describe() for job in registry.jobs()],
        "tasks": [task.describe() for task in registry.tasks()],
    }


def manifest_text(registry: Registry) -> str:
    """`manifest(registry)` as the text written to a file: sorted keys, two-space indents,
    non-ASCII kept as it is, one newline at the end."""
    return json.dumps(manifest(registry), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
