"""The job catalogue: a declaration reaches the database, so an enqueue from SQL, the CLI or
another language gets the declared queue, attempts, priority and tenant rule."""

from __future__ import annotations

import asyncio
import json
import logging

import psycopg
import pytest

import durajobs
from durajobs import DeclareOutcome
from durajobs.cli import main
from durajobs.runtime.worker import Worker
from support.apps import CATALOGUE_APP, CATALOGUE_CHANGED_APP
from support.apps.catalogue_jobs import changed, registry
from support.paths import TESTS
from support.running import run_until


def _row(database_url: str, id: object) -> tuple[str, int, int, str | None]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        found = connection.execute(
            "select queue, max_attempts, priority, tenant_id from jobs.jobs where id = %s", [id]
        ).fetchone()
    assert found is not None
    return found


def _sql_enqueue(database_url: str, name: str, key: str, **arguments: object) -> object:
    """`select jobs.enqueue(...)` as psql, Go or Node would send it: only the names given."""
    named = "".join(f", {argument} => %({argument})s" for argument in arguments)
    with psycopg.connect(database_url, autocommit=True) as connection:
        (id,) = connection.execute(
            f"select id from jobs.enqueue(name => %(name)s, input => '{{}}'::jsonb, "
            f"idempotency_key => %(key)s{named})",
            {"name": name, "key": key, **arguments},
        ).fetchone()
    return id


def test_a_declared_job_enqueued_from_sql_lands_in_its_queue_with_its_attempts(
    database_url, client
):
    answers = registry.declare(client, declared_by="deploy-1")
    assert {answer.name: answer.outcome for answer in answers} == {
        "invoice": DeclareOutcome.ADDED,
        "mail": DeclareOutcome.ADDED,
    }
    from_sql = _sql_enqueue(database_url, "mail", "m-1")
    assert _row(database_url, from_sql) == ("emails", 3, 5, None)
    from_python = registry.get("mail").enqueue({"key": "m-2"}, using=client)  # type: ignore[union-attr]
    assert _row(database_url, from_python.id) == _row(database_url, from_sql)


def test_an_argument_wins_and_an_undeclared_name_keeps_the_built_in_defaults(database_url, client):
    registry.declare(client, declared_by="deploy-1")
    given = _sql_enqueue(database_url, "mail", "m-3", queue="urgent", max_attempts=1)
    assert _row(database_url, given) == ("urgent", 1, 5, None)
    undeclared = _sql_enqueue(database_url, "not-declared", "u-1")
    assert _row(database_url, undeclared) == ("default", 20, 0, None)


def test_a_tenant_job_from_sql_without_a_tenant_is_refused_with_the_fix(database_url, client):
    registry.declare(client, declared_by="deploy-1")
    with pytest.raises(durajobs.JobTenantRequired) as refused:
        client.enqueue("invoice", {"invoice_id": 1, "org_id": "acme"}, "invoice:1")
    assert refused.value.sqlstate == "JQ017"
    assert refused.value.hint == (
        "select jobs.enqueue(name => '<job>', input => '<input>'::jsonb, "
        "idempotency_key => '<key>', tenant_id => '<tenant>')"
    )
    assert refused.value.detail["job"] == "invoice"
    assert client.list_jobs() == [], "the refusal stored nothing"
    kept = client.enqueue("invoice", {"invoice_id": 1}, "invoice:1", tenant_id="acme")
    assert _row(database_url, kept.id) == ("billing", 20, 0, "acme")


def test_two_deploys_declaring_one_name_differently_keep_the_first_until_replaced(
    database_url, client
):
    registry.declare(client, declared_by="deploy-1")
    answers = {answer.name: answer for answer in changed.declare(client, declared_by="deploy-2")}
    assert answers["digest"].outcome is DeclareOutcome.ADDED
    conflict = answers["mail"]
    assert conflict.outcome is DeclareOutcome.CONFLICT
    assert conflict.differences == {"queue": {"stored": "emails", "declared": "mail-v2"}}
    assert conflict.stored_by == "deploy-1"
    assert _row(database_url, _sql_enqueue(database_url, "mail", "k-1"))[0] == "emails"

    replaced = {
        answer.name: answer
        for answer in changed.declare(client, declared_by="deploy-2", replace=True)
    }
    assert replaced["mail"].outcome is DeclareOutcome.REPLACED
    assert _row(database_url, _sql_enqueue(database_url, "mail", "k-2"))[0] == "mail-v2"
    stored = {kind.name: kind for kind in client.job_types()}
    assert stored["mail"].declared_by == "deploy-2"
    assert stored["invoice"].tenant_required is True
    assert stored["mail"].input_schema["properties"] == {"key": {"title": "Key", "type": "string"}}
    assert stored["mail"].retry["attempts"] == 3


def test_a_worker_declares_its_registry_at_start_and_reports_a_conflict(
    database_url, client, monkeypatch, caplog
):
    monkeypatch.setenv("DURAJOBS_DEPLOY", "release-7")
    registry.declare(client, declared_by="deploy-1")
    worker = Worker(changed, database_url, queues=["emails"], listen=False)
    with caplog.at_level(logging.WARNING, logger="durajobs.runtime.worker"):
        asyncio.run(run_until(worker, lambda: len(client.job_types()) == 3))
    stored = {kind.name: kind for kind in client.job_types()}
    assert stored["digest"].declared_by == "release-7", "the deploy names itself"
    assert stored["mail"].queue == "emails", "the worker does not replace a stored declaration"
    conflicts = [record for record in caplog.records if record.msg == "jobs.catalogue.conflict"]
    assert len(conflicts) == 1
    assert conflicts[0].job == "mail"  # type: ignore[attr-defined]
    assert conflicts[0].stored_by == "deploy-1"  # type: ignore[attr-defined]


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def cli(database_url, capsys, monkeypatch):
    monkeypatch.chdir(TESTS)  # --app modules import from the working directory, as in a shell

    def run(*args: str) -> tuple[int, str, str]:
        status = main([*args, "--database-url", database_url])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_migrate_with_app_declares_and_refuses_a_conflict_until_redeclared(cli, client):
    status, out, _ = cli("migrate", "--app", CATALOGUE_APP)
    assert status == 0
    assert "job catalogue: 2 added" in out

    status, out, err = cli("migrate", "--app", CATALOGUE_CHANGED_APP)
    assert status == 1
    assert "error: X_JOB_DECLARATION_CONFLICT" in err
    assert "mail: queue stored 'emails', declared 'mail-v2'" in err
    assert "--redeclare" in err
    assert sorted(kind.name for kind in client.job_types()) == ["invoice", "mail"], (
        "a refused deploy writes none of its declarations, not even the new digest"
    )

    status, out, _ = cli("migrate", "--app", CATALOGUE_CHANGED_APP, "--redeclare")
    assert status == 0
    assert "1 added, 1 replaced" in out
    assert "replaced mail: queue stored 'emails', declared 'mail-v2'" in out
    assert {kind.name: kind.queue for kind in client.job_types()}["mail"] == "mail-v2"


def test_enqueue_with_app_takes_the_model_the_key_and_the_declaration(cli, database_url):
    invoice = '{"invoice_id": 7, "org_id": "acme"}'
    status, out, _ = cli("enqueue", "invoice", "--app", CATALOGUE_APP, "--input", invoice, "--json")
    assert status == 0
    answer = json.loads(out)
    with psycopg.connect(database_url, autocommit=True) as connection:
        stored = connection.execute(
            "select idempotency_key, queue, tenant_id, max_attempts from jobs.jobs where id = %s",
            [answer["id"]],
        ).fetchone()
    assert stored == ("invoice:7", "billing", "acme", 20)

    status, _, err = cli("enqueue", "invoice", "--app", CATALOGUE_APP, "--input", '{"org_id": 1}')
    assert status == 1
    assert "error: X_JOB_INPUT_INVALID" in err
    assert "invoice_id" in err

    status, _, err = cli("enqueue", "nope", "--app", CATALOGUE_APP, "--input", "{}")
    assert status == 1
    assert "declares no job named 'nope'" in err
    assert "invoice, mail" in err

    status, _, err = cli("enqueue", "mail", "--input", "{}")
    assert status == 1
    assert "--key is required without --app" in err


def test_enqueue_without_app_takes_the_catalogue(cli, database_url):
    assert cli("migrate", "--app", CATALOGUE_APP)[0] == 0
    status, out, _ = cli("enqueue", "mail", "--input", "{}", "--key", "cli-1", "--json")
    assert status == 0
    assert _row(database_url, json.loads(out)["id"]) == ("emails", 3, 5, None)


def test_jobs_types_lists_the_catalogue_and_forget_type_removes_a_name(cli):
    status, out, _ = cli("jobs", "types")
    assert status == 0
    assert out.startswith("no job declared in the catalogue")
    cli("migrate", "--app", CATALOGUE_APP)

    status, out, _ = cli("jobs", "types", "--json")
    document = json.loads(out)
    assert [kind["name"] for kind in document["job_types"]] == ["invoice", "mail"]
    assert set(document["job_types"][0]) == {
        "name", "queue", "max_attempts", "priority", "tenant_required", "retry", "timeout",
        "input_schema", "declared_by", "declared_at", "seen_at", "concurrency",
        "concurrency_keyed", "when_busy",
    }  # fmt: skip
    status, out, _ = cli("jobs", "types")
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "QUEUE",
        "ATTEMPTS",
        "PRIORITY",
        "TENANT",
        "LIMIT",
        "DECLARED",
        "BY",
        "SEEN",
    ]
    assert lines[1].split()[:6] == ["invoice", "billing", "20", "0", "required", "-"]
    assert lines[2].split()[:6] == ["mail", "emails", "3", "5", "none", "-"]

    status, out, _ = cli("jobs", "forget-type", "mail")
    assert (status, out.strip()) == (
        0,
        "forgot job type mail: its later enqueues take the built-in defaults",
    )
    status, out, _ = cli("jobs", "forget-type", "mail", "--json")
    assert json.loads(out) == {"job_type": "mail", "forgotten": False}
