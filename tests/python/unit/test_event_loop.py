"""The loop a durajobs command runs on: uvloop when installed, asyncio's when asked for."""

from __future__ import annotations

import asyncio
import importlib

import pytest

from durajobs.errors import ConfigInvalid
from durajobs.runtime import loop as event_loop


async def _running_loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_uvloop_is_the_default_when_installed(monkeypatch):
    monkeypatch.delenv(event_loop.LOOP_VARIABLE, raising=False)
    assert event_loop.loop_name() == "uvloop"
    assert event_loop.run(_running_loop_module()) == "uvloop"


def test_asyncio_when_asked_for(monkeypatch):
    monkeypatch.setenv(event_loop.LOOP_VARIABLE, "asyncio")
    assert event_loop.loop_name() == "asyncio"
    assert event_loop.run(_running_loop_module()) == "asyncio"


def test_a_default_install_without_uvloop_runs_on_asyncio(monkeypatch):
    real = importlib.import_module

    def without_uvloop(name: str, *args: object) -> object:
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib, "import_module", without_uvloop)
    monkeypatch.delenv(event_loop.LOOP_VARIABLE, raising=False)
    assert event_loop.loop_name() == "asyncio"
    monkeypatch.setenv(event_loop.LOOP_VARIABLE, "uvloop")
    with pytest.raises(ConfigInvalid, match="durajobs\\[fast\\]"):
        event_loop.loop_factory()


def test_an_unknown_loop_is_refused(monkeypatch):
    monkeypatch.setenv(event_loop.LOOP_VARIABLE, "trio")
    with pytest.raises(ConfigInvalid) as refused:
        event_loop.loop_factory()
    assert refused.value.detail["field"] == event_loop.LOOP_VARIABLE
