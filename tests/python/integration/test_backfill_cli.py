"""`durajobs backfill list|pending|run` (items 175-177, 180, R74): the deploy gate, the dry run,
--write, --force, --all, and each refusal with its code and one-line fix."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs.cli import main
from support.apps import BACKFILL_APP
from support.paths import TESTS
from support.rows import fetch_all


@pytest.fixture
def cli(database_url, capsys, monkeypatch):
    monkeypatch.chdir(TESTS)
    monkeypatch.delenv("DURAJOBS_ENVIRONMENT", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        status = main([*args, "--app", BACKFILL_APP, "--database-url", database_url])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def _passes(database_url: str, name: str) -> list[tuple[Any, ...]]:
    return fetch_all(
        database_url,
        "select id, state, input from jobs.jobs where name = %s order by created_at",
        [name],
    )


def _complete(database_url: str, name: str) -> None:
    """A pass of `name` that completed: its job enqueued and ended, its ledger row completed."""
    with durajobs.Client.connect(database_url) as client:
        enqueued = client.enqueue(name, {}, name)
        client.run(
            calls.backfill_start(
                name,
                run_id=enqueued.run_id,
                job_id=enqueued.id,
                checksum="c",
                environment="development",
                force=False,
                tenant_id=None,
            )
        )
        client.run(calls.backfill_finish(enqueued.run_id, status="completed"))
        client.run(calls.cancel(enqueued.id, reason="the test ended it"))


def test_a_backfill_never_enqueued_is_pending_and_the_gate_says_so(cli):
    """R74, item 176: declared and deployed but never run is pending, not invisible, and
    `pending` exits non-zero with X_BACKFILL_PENDING and the command that sweeps."""
    status, out, err = cli("backfill", "pending")
    assert status == 1
    assert "X_BACKFILL_PENDING" in err
    assert "items.counted (pending), items.fill (pending)" in err
    assert "items.gated" not in err  # production only: excluded here
    assert "fix: durajobs backfill run --all --write --app" in err

    status, out, _err = cli("backfill", "list", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["environment"] == "development"
    assert {row["name"]: row["state"] for row in report["rows"]} == {
        "items.counted": "pending",
        "items.fill": "pending",
        "items.gated": "excluded",
    }
    assert report["pending"] == ["items.counted", "items.fill"]


def test_run_is_a_dry_run_until_write(cli, database_url):
    """Item 180: without --write nothing is enqueued; --write enqueues the pass (never runs it
    inline), with force false."""
    status, out, _err = cli("backfill", "run", "items.fill")
    assert status == 0
    assert "would enqueue a pass (never run)" in out
    assert _passes(database_url, "items.fill") == []
    status, out, _err = cli("backfill", "run", "items.fill", "--write")
    assert status == 0
    ((job_id, state, input),) = _passes(database_url, "items.fill")
    assert f"enqueued job {job_id}" in out
    assert (state, input) == ("ready", {"force": False})


def test_a_live_pass_refuses_a_second_with_the_job_to_look_at(cli, database_url):
    """Item 180: X_BACKFILL_RUNNING, its fix `durajobs jobs show <id>` of the live pass."""
    cli("backfill", "run", "items.fill", "--write")
    ((job_id, _state, _input),) = _passes(database_url, "items.fill")
    status, _out, err = cli("backfill", "run", "items.fill", "--write")
    assert status == 1
    assert "X_BACKFILL_RUNNING" in err
    assert f"fix: durajobs jobs show {job_id}" in err
    assert len(_passes(database_url, "items.fill")) == 1


def test_a_completed_backfill_refuses_and_force_enqueues_a_new_pass(cli, database_url):
    """Item 180: X_BACKFILL_APPLIED names --force; --force --write enqueues with force true,
    and the gate passes once every backfill here completed."""
    _complete(database_url, "items.fill")
    status, _out, err = cli("backfill", "run", "items.fill", "--write")
    assert status == 1
    assert "X_BACKFILL_APPLIED" in err
    assert f"fix: durajobs backfill run items.fill --write --force --app {BACKFILL_APP}" in err
    status, out, _err = cli("backfill", "run", "items.fill", "--write", "--force")
    assert status == 0
    assert [row[2] for row in _passes(database_url, "items.fill")] == [
        {},
        {"force": True},
    ]
    _complete(database_url, "items.counted")
    # a pass on its way is not a sweep made: the gate waits for it
    status, _out, err = cli("backfill", "pending")
    assert status == 1
    assert "X_BACKFILL_PENDING" in err
    assert "1 backfill(s) not swept in development: items.fill (running)" in err
    status, out, _err = cli("backfill", "list", "--json")
    states = {row["name"]: row["state"] for row in json.loads(out)["rows"]}
    assert states == {
        "items.counted": "completed",
        "items.fill": "running",
        "items.gated": "excluded",
    }


def test_the_gate_waits_for_a_first_pass_on_its_way(cli, database_url):
    """Item 176: `run --all --write && pending` must not go through while the passes it just
    enqueued have not swept anything yet."""
    status, _out, _err = cli("backfill", "run", "--all", "--write")
    assert status == 0
    status, out, err = cli("backfill", "pending", "--json")
    assert status == 1
    assert "items.counted (running), items.fill (running)" in err
    report = json.loads(out)
    assert report["pending"] == []
    assert report["unswept"] == ["items.counted", "items.fill"]


def test_the_gate_passes_when_everything_here_completed(cli, database_url):
    _complete(database_url, "items.fill")
    _complete(database_url, "items.counted")
    status, out, err = cli("backfill", "pending")
    assert (status, err) == (0, "")
    assert "every backfill is swept in development" in out


def test_an_unknown_name_and_a_disallowed_environment_are_refused(cli, database_url):
    """Item 180, item 178 (the gate's side): X_BACKFILL_UNKNOWN and X_BACKFILL_ENVIRONMENT."""
    status, _out, err = cli("backfill", "run", "items.nothing")
    assert status == 1
    assert "X_BACKFILL_UNKNOWN" in err
    assert f"fix: durajobs backfill list --app {BACKFILL_APP}" in err
    status, _out, err = cli("backfill", "run", "items.gated", "--write")
    assert status == 1
    assert "X_BACKFILL_ENVIRONMENT" in err
    assert _passes(database_url, "items.gated") == []


def test_a_required_migration_not_applied_refuses(cli, database_url, monkeypatch):
    """Item 177: items.gated requires the application's revision app_0002: refused with
    X_BACKFILL_MIGRATION_PENDING while the version table lacks it, enqueued once it is there."""
    monkeypatch.setenv("DURAJOBS_ENVIRONMENT", "production")
    status, _out, err = cli("backfill", "run", "items.gated", "--write")
    assert status == 1
    assert "X_BACKFILL_MIGRATION_PENDING" in err
    assert "fix: alembic upgrade head" in err
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table alembic_version (version_num varchar(32) primary key)")
        connection.execute("insert into alembic_version values ('app_0001')")
    status, _out, err = cli("backfill", "run", "items.gated", "--write")
    assert "X_BACKFILL_MIGRATION_PENDING" in err
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update alembic_version set version_num = 'app_0002'")
    status, _out, _err = cli("backfill", "run", "items.gated", "--write")
    assert status == 0
    assert len(_passes(database_url, "items.gated")) == 1


def test_a_required_revision_behind_the_head_is_applied(cli, database_url, monkeypatch, tmp_path):
    """Item 177: with the application's alembic.ini, a revision that is an ancestor of the
    applied head counts as applied."""
    monkeypatch.setenv("DURAJOBS_ENVIRONMENT", "production")
    versions = tmp_path / "versions"
    versions.mkdir()
    for revision, down in (("app_0001", None), ("app_0002", "app_0001"), ("app_0003", "app_0002")):
        (versions / f"{revision}.py").write_text(
            f'revision = "{revision}"\ndown_revision = {down!r}\nbranch_labels = None\n'
            "depends_on = None\n\ndef upgrade():\n    pass\n\ndef downgrade():\n    pass\n"
        )
    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = {tmp_path}\n")
    (tmp_path / "script.py.mako").write_text("")
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table alembic_version (version_num varchar(32) primary key)")
        connection.execute("insert into alembic_version values ('app_0003')")
    status, _out, err = cli("backfill", "run", "items.gated")
    assert status == 1
    assert "X_BACKFILL_MIGRATION_PENDING" in err  # without the ini, only the head is known
    status, out, err = cli("backfill", "run", "items.gated", "--alembic-config", str(ini))
    assert (status, err) == (0, "")
    assert "would enqueue" in out


def test_all_takes_each_backfill_alone_and_goes_on_past_a_refusal(cli, database_url, monkeypatch):
    """Item 180: --all in production: items.gated is refused (its migration is not applied),
    the other two are enqueued all the same, and the command exits 1."""
    monkeypatch.setenv("DURAJOBS_ENVIRONMENT", "production")
    status, out, _err = cli("backfill", "run", "--all", "--write")
    assert status == 1
    assert "items.gated: error: X_BACKFILL_MIGRATION_PENDING" in out
    assert "items.gated: fix: alembic upgrade head" in out
    assert len(_passes(database_url, "items.fill")) == 1
    assert len(_passes(database_url, "items.counted")) == 1
    assert _passes(database_url, "items.gated") == []
    # again: the live passes are skipped, not refused
    status, out, _err = cli("backfill", "run", "--all", "--write")
    assert "items.fill: skipped, its pass is live" in out
    assert len(_passes(database_url, "items.fill")) == 1


def test_jobs_show_and_list_show_the_same_numbers(cli, database_url):
    """Item 181: the one projection feeds `backfill list` and `jobs show` alike."""
    cli("backfill", "run", "items.fill", "--write")
    ((job_id, _state, _input),) = _passes(database_url, "items.fill")
    with durajobs.Client.connect(database_url) as client:
        (row,) = client.run(calls.list_jobs(name="items.fill"))
        client.run(
            calls.backfill_start(
                "items.fill",
                run_id=row.run_id,
                job_id=row.id,
                checksum="c",
                environment="development",
                force=False,
                tenant_id=None,
            )
        )
        client.run(calls.backfill_progress(row.run_id, batches=4, rows_processed=7))
    _status, out, _err = cli("backfill", "list", "--json")
    (listed,) = [r for r in json.loads(out)["rows"] if r["name"] == "items.fill"]
    status, out, _err = cli("jobs", "show", str(job_id), "--json")
    assert status == 0
    shown = json.loads(out)["backfill"]
    assert {k: shown[k] for k in listed} == listed
    assert (listed["state"], listed["batches"], listed["rows"]) == ("running", 4, 7)
    assert shown["this_pass"]["batches"] == 4
    status, out, _err = cli("jobs", "show", str(job_id))
    assert "backfill:" in out
    assert "running (this pass: running, 4 batches, 7 rows)" in out
    # read for another environment, as `backfill list --environment` reads it
    _status, out, _err = cli("jobs", "show", str(job_id), "--json", "--environment", "qa")
    assert json.loads(out)["backfill"]["state"] == "running"
    _status, out, _err = cli("backfill", "list", "--json", "--environment", "production")
    (gated,) = [r for r in json.loads(out)["rows"] if r["name"] == "items.gated"]
    assert gated["state"] == "pending"


def test_the_dashboard_shows_the_same_projection(cli, database_url):
    """Item 181: the dashboard's backfills page reads the one projection too."""
    from starlette.testclient import TestClient

    import durajobs.dashboard
    from support.apps.backfill_jobs import registry

    cli("backfill", "run", "items.fill", "--write")
    _complete(database_url, "items.counted")
    _status, out, _err = cli("backfill", "list", "--json")
    listed = {row["name"]: row["state"] for row in json.loads(out)["rows"]}
    with TestClient(durajobs.dashboard.app(database_url, registry=registry)) as browser:
        page = browser.get("/backfills").text
        shown = dict(
            re.findall(r"<td>(items\.\w+)</td>\s*<td><span class=\"state\">(\w+)</span>", page)
        )
        assert (
            shown
            == listed
            == {
                "items.counted": "completed",
                "items.fill": "running",
                "items.gated": "excluded",
            }
        )
        assert "Not swept in development: items.fill (running)" in page
        production = browser.get("/backfills", params={"environment": "production"}).text
        assert '<td>items.gated</td>\n      <td><span class="state">pending</span>' in production
    with TestClient(durajobs.dashboard.app(database_url)) as browser:
        assert "--app module:registry" in browser.get("/backfills").text
