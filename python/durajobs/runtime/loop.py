"""The event loop a durajobs process runs on: uvloop when it is installed (`pip install
'durajobs[fast]'`), asyncio's own otherwise. `DURAJOBS_LOOP=asyncio` keeps asyncio's even with
uvloop installed, `DURAJOBS_LOOP=uvloop` insists on uvloop (X_CONFIG_INVALID without it).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from durajobs.errors import ConfigInvalid

T = TypeVar("T")

LOOP_VARIABLE = "DURAJOBS_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop to run on; None for asyncio's default."""
    wanted = os.environ.get(LOOP_VARIABLE, "").strip().lower() or "auto"
    if wanted not in ("auto", "uvloop", "asyncio"):
        raise ConfigInvalid(
            f"{LOOP_VARIABLE} must be 'uvloop', 'asyncio' or unset, got {wanted!r}",
            detail={"field": LOOP_VARIABLE},
        )
    if wanted == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if wanted == "uvloop":
            raise ConfigInvalid(
                f"{LOOP_VARIABLE}=uvloop but uvloop is not installed: pip install 'durajobs[fast]'",
                detail={"field": LOOP_VARIABLE},
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    """'uvloop' or 'asyncio': what `run` would run on now."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to its end on the chosen loop, as asyncio.run does."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
