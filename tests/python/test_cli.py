"""The `durajobs` command, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import psycopg
import pytest

from durajobs.cli.embedded import EmbeddedUnavailable, embedded_postgres

# a root login's PATH: pgserver, run as root on a machine it has not seen, calls useradd
_ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _durajobs(*args, env_url=None):
    environment = {"PATH": _ROOT_PATH}
    if env_url:
        environment["DATABASE_URL"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "durajobs.cli", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_migrate_installs_the_schema(empty_database_url):
    done = _durajobs("migrate", "--database-url", empty_database_url)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_database_url) as connection:
        assert connection.execute("select jobs.version()").fetchone() == (1,)


def test_enqueue_answers_the_ids_as_json_and_dedupes(database_url):
    first = _durajobs(
        "enqueue",
        "send-email",
        "--input",
        '{"to": "a@b.c"}',
        "--key",
        "welcome:1",
        "--queue",
        "emails",
        "--json",
        env_url=database_url,
    )
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert set(answer) == {"id", "run_id", "deduped"}
    assert answer["deduped"] is False

    again = _durajobs(
        "enqueue",
        "send-email",
        "--input",
        "{}",
        "--key",
        "welcome:1",
        "--json",
        env_url=database_url,
    )
    assert json.loads(again.stdout) == {**answer, "deduped": True}
    with psycopg.connect(database_url) as connection:
        row = connection.execute("select name, queue, input from jobs.jobs").fetchall()
    assert row == [("send-email", "emails", {"to": "a@b.c"})]


def test_bad_input_is_refused_with_its_code_and_stores_nothing(database_url):
    for bad in ("{not json", "[1, 2]"):
        done = _durajobs("enqueue", "n", "--input", bad, "--key", "k", env_url=database_url)
        assert done.returncode == 1
        assert "X_JOB_INPUT_INVALID" in done.stderr
        assert "fix:" in done.stderr
    refused = _durajobs(
        "enqueue", "n", "--input", "{}", "--key", "k", "--max-attempts", "0", env_url=database_url
    )
    assert refused.returncode == 1
    assert "X_ARGUMENT_INVALID" in refused.stderr
    with psycopg.connect(database_url) as connection:
        assert connection.execute("select count(*) from jobs.jobs").fetchone() == (0,)


def test_a_missing_database_url_names_the_fix():
    done = _durajobs("enqueue", "n", "--input", "{}", "--key", "k")
    assert done.returncode == 1
    assert "X_DATABASE_URL_MISSING" in done.stderr
    assert "DATABASE_URL" in done.stderr


def test_an_unmigrated_database_names_durajobs_migrate(empty_database_url):
    done = _durajobs("enqueue", "n", "--input", "{}", "--key", "k", env_url=empty_database_url)
    assert done.returncode == 1
    assert "X_SCHEMA_VERSION_MISMATCH" in done.stderr
    assert "durajobs migrate" in done.stderr


def test_the_demo_runs_a_real_worker_against_a_given_database(empty_database_url):
    done = _durajobs("demo", "--users", "20", env_url=empty_database_url)
    assert done.returncode == 0, done.stderr
    assert "deduped=True" in done.stdout
    assert "[##############################] 62/62" in done.stdout
    assert "dead letter: charge-card after attempt 1: X_DEMO_CARD_DECLINED" in done.stdout
    with psycopg.connect(empty_database_url) as connection:
        states = dict(connection.execute("select state, count(*) from jobs.jobs group by 1"))
        retried = connection.execute(
            "select name, attempt from jobs.jobs where attempt > 1 order by 1"
        ).fetchall()
        slept = connection.execute(
            "select count(*) from jobs.steps where name = 'wait-a-moment' and status = 'completed'"
        ).fetchone()
    # 20 welcomes from SQL, 20 CRM syncs and 20 charges from Python, 2 follow-ups that sleep
    assert states == {"done": 61, "dead": 1}
    assert retried == [("sync-crm", 2), ("sync-crm", 2)]  # users 3 and 13 failed once
    assert slept == (2,)


def test_the_demo_runs_on_an_embedded_postgres_without_a_database_url():
    done = _durajobs("demo", "--users", "5")
    assert done.returncode == 0, done.stderr
    assert "embedded Postgres" in done.stdout
    assert "summary:" in done.stdout


def test_the_embedded_postgres_names_a_tool_missing_from_path(monkeypatch):
    # pgserver run as root adds its system user with useradd; with /usr/sbin off PATH that is a
    # FileNotFoundError deep in subprocess, which must reach the user as a code and a fix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset in root shells
        import pgserver

    def useradd_not_on_path(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "useradd")

    monkeypatch.setattr(pgserver, "get_server", useradd_not_on_path)
    with pytest.raises(EmbeddedUnavailable) as refused, embedded_postgres():
        pass
    assert str(refused.value).startswith("X_EMBEDDED_UNAVAILABLE: ")
    assert "useradd is not on PATH" in str(refused.value)
    assert "/usr/sbin" in refused.value.hint
