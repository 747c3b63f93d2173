"""`durajobs limits show` and the limit line of `durajobs jobs show`: what a limit holds now."""

from __future__ import annotations

import json

import pytest

from durajobs.cli import main
from support.apps import LIMITED_APP
from support.apps.limited import registry
from support.paths import TESTS


@pytest.fixture
def cli(database_url, capsys, monkeypatch):
    monkeypatch.chdir(TESTS)

    def run(*args: str) -> tuple[int, str]:
        status = main([*args, "--database-url", database_url])
        return status, capsys.readouterr().out

    return run


def test_limits_show_lists_each_group_and_jobs_show_says_a_row_is_held_back(cli, client):
    assert cli("limits", "show")[1].strip() == "no job declares a concurrency limit"
    assert cli("migrate", "--app", LIMITED_APP)[0] == 0
    per_account = registry.get("per-account")
    assert per_account is not None
    first = per_account.enqueue({"n": 1, "key": "acct-1"}, using=client)
    second = per_account.enqueue({"n": 2, "key": "acct-1"}, using=client)
    [claimed] = client.claim(["default"], "w-limits", batch_size=5)
    assert claimed.id == first.id

    status, out = cli("limits", "show", "--json")
    assert status == 0
    rows = {(row["name"], row["concurrency_key"]): row for row in json.loads(out)["limits"]}
    assert rows[("per-account", "acct-1")] == {
        "name": "per-account",
        "concurrency_key": "acct-1",
        "concurrency": 1,
        "when_busy": "wait",
        "running": 1,
        "waiting": 1,
        "held_back": 1,
        "holders": ["w-limits"],
    }
    assert rows[("one-at-a-time", None)]["running"] == 0
    lines = cli("limits", "show", "--name", "per-account")[1].splitlines()
    assert lines[0].split() == [
        "JOB",
        "KEY",
        "LIMIT",
        "RUNNING",
        "WAITING",
        "HELD",
        "BACK",
        "HOLDERS",
    ]
    assert lines[1].split() == ["per-account", "acct-1", "1", "1", "1", "1", "w-limits"]

    shown = cli("jobs", "show", str(second.id))[1]
    assert "1 per key 'acct-1', 1 running: held back until a place is free" in shown
    detail = json.loads(cli("jobs", "show", str(second.id), "--json")[1])
    assert detail["limit"]["held_back"] is True
    unlimited = registry.get("unlimited")
    assert unlimited is not None
    plain = unlimited.enqueue({"n": 3}, using=client)
    assert json.loads(cli("jobs", "show", str(plain.id), "--json")[1])["limit"] is None
