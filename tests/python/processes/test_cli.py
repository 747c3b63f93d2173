"""The `durajobs` command (and alembic's), run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg

import durajobs
from support.apps import OPERATOR_APP
from support.paths import REPOSITORY, TESTS
from support.rows import schema_exists
from support.states import failed_job, stored_row

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
        assert connection.execute("select jobs.version()").fetchone() == (durajobs.SCHEMA_VERSION,)


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


# -- the operator commands ------------------------------------------------------------------------


def _process(*args, database_url):
    return subprocess.run(
        [sys.executable, "-m", "durajobs.cli", *args],
        capture_output=True,
        text=True,
        cwd=TESTS,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DATABASE_URL": database_url},
        timeout=120,
    )


def test_a_real_process_shows_lists_and_refuses(client, database_url):
    id = failed_job(client, "flaky-1", "flaky", name="flaky", max_attempts=4)

    shown = _process("jobs", "show", str(id), "--app", OPERATOR_APP, database_url=database_url)
    assert shown.returncode == 0, shown.stderr
    assert "last error:      X_MAIL_REFUSED: the mail server said no" in shown.stdout
    assert "  after attempt 3: wait 8s" in shown.stdout

    listed = _process("jobs", "list", "--json", database_url=database_url)
    assert [job["id"] for job in json.loads(listed.stdout)["jobs"]] == [str(id)]

    removed = _process("jobs", "remove", str(id), "--json", database_url=database_url)
    assert json.loads(removed.stdout) == {"id": str(id), "action": "removed", "ok": True}
    assert stored_row(client, id) is None

    missing = _process("jobs", "requeue", str(id), database_url=database_url)
    assert missing.returncode == 1
    assert "error: X_JOB_NOT_FOUND" in missing.stderr
    assert "fix: durajobs jobs list --id-prefix <first characters of the id>" in missing.stderr
    assert "see: docs/errors.md#x_job_not_found" in missing.stderr

    malformed = _process("jobs", "cancel", "not-an-id", database_url=database_url)
    assert malformed.returncode == 2
    assert "is not a job id" in malformed.stderr


# -- alembic --------------------------------------------------------------------------------------


def _as_url(conninfo: str) -> str:
    """Spell a libpq conninfo as the URL alembic's command line wants."""
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    credentials = str(parts.get("user", ""))
    if parts.get("password"):
        credentials += f":{parts['password']}"
    host, port = str(parts.get("host", "localhost")), parts.get("port", 5432)
    if host.startswith("/"):
        return f"postgresql://{credentials}@/{parts['dbname']}?host={host}&port={port}"
    return f"postgresql://{credentials}@{host}:{port}/{parts['dbname']}"


def test_alembic_command_line_upgrades_and_downgrades(empty_database_url):
    environment = {**os.environ, "DATABASE_URL": _as_url(empty_database_url)}
    alembic = [sys.executable, "-m", "alembic"]

    subprocess.run([*alembic, "upgrade", "head"], cwd=REPOSITORY, env=environment, check=True)
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        row = connection.execute(
            "select * from jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k')"
        ).fetchone()
        assert row is not None
        assert row[2] is False
    subprocess.run([*alembic, "downgrade", "base"], cwd=REPOSITORY, env=environment, check=True)
    assert not schema_exists(empty_database_url)
