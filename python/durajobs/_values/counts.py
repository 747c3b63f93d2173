"""Counts as users set them (slots, batch sizes), checked where they are set: a whole number of
at least 1, and at most a bound when the database has one. A bool is refused: `True` is not 1
to the person who wrote it."""

from __future__ import annotations

from durajobs.errors import ConfigInvalid


def parse_count(value: object, *, field: str, most: int | None = None) -> int:
    """Return `value` when it is a whole number from 1 to `most`; raise X_CONFIG_INVALID naming
    `field` otherwise."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1
        and (most is None or value <= most)
    ):
        return value
    bound = "" if most is None else f" and at most {most}"
    raise ConfigInvalid(
        f"{field} must be a whole number of at least 1{bound}, got {value!r}",
        detail={"field": field},
    )
