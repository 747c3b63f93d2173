"""The integration examples in examples/ run against a real database."""

from __future__ import annotations

import sys

import psycopg
from sqlalchemy.orm import Session

from support.paths import REPOSITORY

sys.path.insert(0, str(REPOSITORY))

from examples.sqlalchemy_app import build, place_order


def _as_url(conninfo: str) -> str:
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    password = f":{parts['password']}" if parts.get("password") else ""
    return (
        f"postgresql://{parts.get('user', '')}{password}@{parts.get('host', 'localhost')}:"
        f"{parts.get('port', 5432)}/{parts['dbname']}"
    )


def _count(database_url: str, query: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query).fetchone()[0]


def test_an_order_and_its_job_commit_together(database_url):
    engine, jobs = build(_as_url(database_url))
    with Session(engine) as session:
        order = place_order(session, jobs, "ada")
        session.commit()
        job_id = order.receipt_job
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "select name, input from jobs.jobs where id = %s", [job_id]
        ).fetchone()
    assert row == ("send-receipt", {"order_id": order.id})
    engine.dispose()


def test_an_order_rolled_back_leaves_no_job(database_url):
    engine, jobs = build(_as_url(database_url))
    with Session(engine) as session:
        place_order(session, jobs, "grace")
        session.rollback()
    assert _count(database_url, "select count(*) from orders") == 0
    assert _count(database_url, "select count(*) from jobs.jobs") == 0
    engine.dispose()


def test_a_fastapi_handler_writes_the_row_and_the_job_in_one_transaction(database_url):
    from examples.fastapi_app import create_app
    from fastapi.testclient import TestClient

    with TestClient(create_app(_as_url(database_url))) as client:
        created = client.post("/orders", json={"customer": "linus"})
        refused = client.post("/orders", json={"customer": "refuse-after-enqueue"})
    assert created.status_code == 200
    assert refused.status_code == 409
    body = created.json()
    with psycopg.connect(database_url, autocommit=True) as connection:
        jobs = connection.execute("select id::text, run_id::text, input from jobs.jobs").fetchall()
        orders = connection.execute("select id, customer from orders").fetchall()
    # the refused request left neither its order nor its job
    assert orders == [(body["order_id"], "linus")]
    assert jobs == [(body["job_id"], body["run_id"], {"order_id": body["order_id"]})]
