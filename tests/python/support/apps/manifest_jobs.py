"""Jobs and tasks whose names sort differently by code point and by a locale's collation, for
the manifest test: by code point 'B' < 'a' < 'b' < 'e' < 'é'."""

from __future__ import annotations

from typing import Any

from durajobs import Registry
from support.factory import declare

registry = Registry()

for name in ["b", "B", "é", "a", "e"]:

    @declare(registry, name)
    def handler(ctx: Any) -> None:
        return None


@registry.task(name="nightly", cron="0 3 * * *", tz="Europe/Paris", catch_up="run-once")
def nightly(occurrence: Any) -> list[tuple[Any, dict[str, Any]]]:
    # the fan-out: the task enqueues 'e' then 'a', and 'e' again for another key
    return [
        (registry.get("e"), {"key": f"e-{occurrence:%Y%m%d}"}),
        (registry.get("a"), {"key": f"a-{occurrence:%Y%m%d}"}),
        (registry.get("e"), {"key": f"e2-{occurrence:%Y%m%d}"}),
    ]
