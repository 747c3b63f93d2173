"""Least privilege from Python: a worker whose login holds only the worker role runs jobs end to
end (the runtime needs no table privilege), an enqueuer login enqueues but is refused the worker
protocol with X_PERMISSION_DENIED and its fix, and a login holding no durajobs role is refused by
Postgres, which the client raises as X_PERMISSION_DENIED too. The SQL side, every function for
every role, is tests/pgtap/012_roles.sql."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from pydantic import BaseModel

import durajobs
from durajobs._db import calls
from durajobs.errors import JobTenantMismatch, PermissionDenied
from durajobs.runtime.worker import Worker
from support.factory import declare
from support.running import run_until


@pytest.fixture
def roles(database_url: str) -> Iterator[dict[str, str]]:
    """Make the three roles under fresh names and a login for each (roles are the cluster's, so
    every name is new and all of them go afterwards)."""
    tag = uuid.uuid4().hex[:8]
    names = {kind: f"t{tag}_{kind}" for kind in ("enqueuer", "worker", "operator")}
    logins = {kind: f"t{tag}_{kind}_login" for kind in (*names, "nobody")}
    with durajobs.Client.connect(database_url) as owner:
        granted = owner.run(calls.grant_roles(**names))
        assert [(grant.kind, grant.created) for grant in granted] == [
            ("enqueuer", True),
            ("worker", True),
            ("operator", True),
        ]
        for kind, login in logins.items():
            # a password of its own: a server that asks for one (scram in CI) must not be sent
            # the owner's PGPASSWORD
            owner.connection.execute(f"create role {login} login password '{tag}'")
            if kind in names:
                owner.connection.execute(f"grant {names[kind]} to {login}")
    try:
        urls = {
            f"{kind}_url": make_conninfo(database_url, user=login, password=tag)
            for kind, login in logins.items()
        }
        yield {**urls, **{f"{kind}_role": name for kind, name in names.items()}}
    finally:
        with psycopg.connect(database_url, autocommit=True) as owner:
            for role in (*logins.values(), *names.values()):
                owner.execute(f"drop owned by {role} cascade")
                owner.execute(f"drop role {role}")


def test_a_worker_login_with_only_the_worker_role_runs_jobs_end_to_end(database_url, roles):
    ran: list[str] = []
    registry = durajobs.Registry(database_url=roles["enqueuer_url"])

    @declare(registry, "least.privilege")
    def handler(ctx: Any) -> None:
        ran.append(ctx.input.key)

    for n in range(5):
        registry.get("least.privilege").enqueue({"key": f"k{n}"})
    worker = Worker(registry, roles["worker_url"], queues=["default"])
    asyncio.run(run_until(worker, lambda: len(ran) == 5))

    with psycopg.connect(database_url) as owner:
        states = owner.execute("select state, count(*) from jobs.jobs group by state").fetchall()
    assert states == [("done", 5)]


def test_an_enqueuer_is_refused_the_worker_protocol_with_the_role_to_grant(roles):
    with durajobs.Client.connect(roles["enqueuer_url"]) as client:
        client.enqueue("n", {}, "k")
        with pytest.raises(PermissionDenied) as refused:
            client.claim(["default"], "w")
    assert refused.value.code == "X_PERMISSION_DENIED"
    assert refused.value.detail["function"] == "jobs.claim_v1"
    assert refused.value.hint is not None
    assert refused.value.hint.startswith(f"grant {roles['worker_role']} to ")


def test_a_login_without_a_durajobs_role_is_refused_with_the_code_and_fix(roles):
    # refused already by the schema check on connect: such a worker never starts
    with pytest.raises(PermissionDenied) as refused, durajobs.Client.connect(roles["nobody_url"]):
        pass
    assert refused.value.code == "X_PERMISSION_DENIED"
    assert refused.value.detail == {"sqlstate": "42501"}
    assert "durajobs roles" in (refused.value.hint or "")


def test_durajobs_roles_makes_the_roles_from_the_command_line(database_url):
    tag = uuid.uuid4().hex[:8]
    names = [f"c{tag}_{kind}" for kind in ("e", "w", "o")]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "roles",
            "--database-url",
            database_url,
            "--enqueuer",
            names[0],
            "--worker",
            names[1],
            "--operator",
            names[2],
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        assert done.returncode == 0, done.stderr
        assert f"enqueuer: made role {names[0]}" in done.stdout
        assert f"operator: made role {names[2]}" in done.stdout
    finally:
        with psycopg.connect(database_url, autocommit=True) as owner:
            for role in names:
                owner.execute(f"drop owned by {role} cascade")
                owner.execute(f"drop role if exists {role}")


def test_a_login_bound_to_a_tenant_enqueues_for_it_alone(database_url, roles):
    tenant_role = f"{roles['enqueuer_role']}_acme"
    with psycopg.connect(database_url, autocommit=True) as owner:
        owner.execute(f"create role {tenant_role}")
        owner.execute(f"grant {tenant_role} to {roles['enqueuer_role']}_login")
        owner.execute("select jobs.bind_tenant(%s, 'acme')", [tenant_role])
    try:
        with durajobs.Client.connect(roles["enqueuer_url"]) as client:
            job = client.enqueue("n", {}, "k")
            with pytest.raises(JobTenantMismatch) as refused:
                client.enqueue("n", {}, "k2", tenant_id="globex")
        assert refused.value.code == "X_JOB_TENANT_MISMATCH"
        with psycopg.connect(database_url) as owner:
            tenants = owner.execute("select id, tenant_id from jobs.jobs").fetchall()
        assert tenants == [(job.id, "acme")]
    finally:
        with psycopg.connect(database_url, autocommit=True) as owner:
            owner.execute("select jobs.unbind_tenant(%s)", [tenant_role])
            owner.execute(f"drop role {tenant_role}")


class Payment(BaseModel):
    key: str
    card_number: str


def test_a_worker_declares_its_registrys_redacted_keys(database_url, roles):
    registry = durajobs.Registry(database_url=roles["enqueuer_url"], redact=["card-number"])

    @declare(registry, "pay", input=Payment)
    def handler(ctx: Any) -> None:
        return None

    job = registry.get("pay").enqueue({"key": "k", "card_number": "4111"})
    worker = Worker(registry, roles["worker_url"], queues=["default"])
    with psycopg.connect(database_url) as owner:

        def done() -> bool:
            (state,) = owner.execute(
                "select state from jobs.jobs where id = %s", [job.id]
            ).fetchone()
            owner.rollback()
            return bool(state == "done")

        asyncio.run(run_until(worker, done))
    with durajobs.Client.connect(roles["operator_url"]) as operator:
        shown = operator.inspect_job(job.id)
    assert shown["job"]["input"] == {"key": "k", "card_number": "[redacted]"}


def test_an_upgrade_keeps_the_roles_on_functions_it_makes_again_or_adds(empty_database_url):
    # revision 0020 drops and makes jobs.enqueue and jobs.cancel again (new arguments) and adds
    # jobs.results: a role granted at 0019 must keep the one and get the others
    durajobs.migrate(empty_database_url, "0019")
    tag = uuid.uuid4().hex[:8]
    names = {kind: f"u{tag}_{kind}" for kind in ("enqueuer", "worker", "operator")}
    login = f"u{tag}_login"
    with durajobs.Client(
        psycopg.connect(empty_database_url, autocommit=True), check=False
    ) as owner:
        owner.connection.execute("select * from jobs.grant_roles(%s, %s, %s)", list(names.values()))
        owner.connection.execute(f"create role {login} login password '{tag}'")
        owner.connection.execute(f"grant {names['enqueuer']} to {login}")
    try:
        durajobs.migrate(empty_database_url)
        url = make_conninfo(empty_database_url, user=login, password=tag)
        with durajobs.Client.connect(url) as enqueuer:
            job = enqueuer.enqueue("after-upgrade", {}, "after-upgrade:1")
            assert [outcome.id for outcome in enqueuer.run(calls.results([job.id]))] == [job.id]
        with psycopg.connect(empty_database_url, autocommit=True) as owner:
            # and PUBLIC executes nothing, the new functions included
            public = owner.execute(
                "select count(*) from pg_proc p where p.pronamespace = 'jobs'::regnamespace"
                " and has_function_privilege('public', p.oid, 'execute')"
            ).fetchone()
            assert public == (0,)
    finally:
        with psycopg.connect(empty_database_url, autocommit=True) as owner:
            for role in (login, *names.values()):
                owner.execute(f"drop owned by {role} cascade")
                owner.execute(f"drop role {role}")
