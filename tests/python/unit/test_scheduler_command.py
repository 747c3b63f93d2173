"""`durajobs scheduler --renew-every` sets how soon a dead leader is replaced."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durajobs.cli import main
from durajobs.services import scheduler as scheduler_module
from support.apps import SAMPLE_APP

URL = "postgresql://nowhere.invalid/app"


@pytest.fixture
def built(monkeypatch) -> list[Any]:
    schedulers: list[Any] = []

    async def run(self) -> None:
        schedulers.append(self)

    monkeypatch.setattr(scheduler_module.Scheduler, "run", run)
    return schedulers


def test_the_lease_is_thirty_seconds_unless_told(built):
    assert main(["scheduler", "--database-url", URL, "--app", SAMPLE_APP]) == 0
    (scheduler,) = built
    assert scheduler.renew_every == timedelta(seconds=10)
    assert scheduler.ttl == timedelta(seconds=30)


def test_renew_every_sets_the_renewal_and_a_lease_three_times_it(built):
    arguments = ["scheduler", "--database-url", URL, "--app", SAMPLE_APP, "--renew-every", "500ms"]
    assert main(arguments) == 0
    (scheduler,) = built
    assert scheduler.renew_every == timedelta(milliseconds=500)
    assert scheduler.ttl == timedelta(milliseconds=1500)


def test_a_bad_renewal_is_refused_with_its_code(built, capsys):
    arguments = ["scheduler", "--database-url", URL, "--app", SAMPLE_APP, "--renew-every", "soon"]
    assert main(arguments) == 1
    error = capsys.readouterr().err
    assert "X_JOB_DECLARATION_INVALID" in error
    assert "--renew-every" in error
    assert built == []
