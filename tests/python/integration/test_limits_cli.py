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
    assert cli("limits", "show")[1].strip() == "no limit is declared or set"
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
        "scope": "job",
        "name": "per-account",
        "concurrency_key": "acct-1",
        "queue": None,
        "tenant_id": None,
        "concurrency": 1,
        "when_busy": "wait",
        "rate": None,
        "per": None,
        "started": None,
        "running": 1,
        "waiting": 1,
        "held_back": 1,
        "holders": ["w-limits"],
    }
    assert rows[("one-at-a-time", None)]["running"] == 0
    lines = cli("limits", "show", "--name", "per-account")[1].splitlines()
    assert lines[0].split() == [
        "SCOPE",
        "OF",
        "LIMIT",
        "RUNNING",
        "WAITING",
        "HELD",
        "BACK",
        "HOLDERS",
    ]
    assert lines[1].split() == [
        "job",
        "per-account",
        "key",
        "'acct-1'",
        "1",
        "running",
        "1",
        "1",
        "1",
        "w-limits",
    ]

    shown = cli("jobs", "show", str(second.id))[1]
    assert "1 per key 'acct-1', 1 running: held back until a place is free" in shown
    detail = json.loads(cli("jobs", "show", str(second.id), "--json")[1])
    assert detail["limit"]["held_back"] is True
    unlimited = registry.get("unlimited")
    assert unlimited is not None
    plain = unlimited.enqueue({"n": 3}, using=client)
    assert json.loads(cli("jobs", "show", str(plain.id), "--json")[1])["limit"] is None


def test_limits_set_and_clear_from_the_command_line(cli, client):
    status, out = cli(
        "limits",
        "set",
        "--tenant",
        "acme",
        "--concurrency",
        "2",
        "--rate",
        "30/1m",
        "--by",
        "ops:alice",
        "--json",
    )
    assert status == 0
    rule = json.loads(out)["limit"]
    assert (rule["tenant_id"], rule["queue"], rule["every_tenant"]) == ("acme", None, False)
    assert (rule["concurrency"], rule["rate"], rule["per"], rule["set_by"]) == (
        2,
        30,
        60.0,
        "ops:alice",
    )
    text = cli("limits", "set", "--every-tenant", "--queue", "reports", "--concurrency", "5")[1]
    assert text.strip() == "limit for each tenant in queue reports: at most 5 running"

    for n in range(3):
        client.enqueue("report", {"n": n}, f"r{n}", queue="reports", tenant_id="acme")
    claimed = client.claim(["reports"], "w-cli", batch_size=10)
    assert len(claimed) == 2  # the acme rule: 2 running at most
    status, out = cli("limits", "show", "--json")
    shown = {
        (row["scope"], row["tenant_id"], row["queue"]): row for row in json.loads(out)["limits"]
    }
    acme = shown[("tenant", "acme", None)]
    assert (acme["running"], acme["waiting"], acme["held_back"], acme["started"]) == (2, 1, 1, 2)
    assert shown[("every tenant", "acme", "reports")]["running"] == 2

    waiting = client.list_jobs(queue="reports", state="ready")
    shown_job = cli("jobs", "show", str(waiting[0].id))[1]
    assert "tenant acme in every queue: 2 of 2 running, 2 of 30 started per 1m 0s" in shown_job
    assert "held back until it has room" in shown_job

    assert cli("limits", "clear", "--tenant", "acme", "--kind", "rate", "--json")[0] == 0
    assert json.loads(cli("limits", "clear", "--tenant", "acme", "--json")[1])["removed"] is True
    assert json.loads(cli("limits", "clear", "--tenant", "acme", "--json")[1])["removed"] is False
    assert cli("limits", "set", "--tenant", "acme", "--rate", "thirty")[0] == 1
    assert cli("limits", "set", "--tenant", "acme", "--concurrency", "-1")[0] == 1
