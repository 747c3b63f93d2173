"""The jobs the fault suite runs in real worker processes (`--app fault_jobs:registry`).

Every body writes what it did to the table `effects` of the queue's own database, through a
connection of its thread's own, so a test counts what ran across kills, terminations and
restarts. A body whose effect cannot be written fails, and its job is retried like any other."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import psycopg
from pydantic import BaseModel

from durajobs import Registry
from durajobs.declare.retry import RetryPolicy

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)
_local = threading.local()

STEPS = ("one", "two", "three")


class Work(BaseModel):
    key: str
    ms: int = 0


def record(run_id: object, what: str, attempt: int) -> None:
    """Write one effect, exactly once per call: a connection cut under it (the faults these
    tests make) is opened again and the write repeated under the same token, which the table
    takes once. So a body fails only when durajobs' own calls do, never for its test probe."""
    token = uuid.uuid4()
    deadline = time.monotonic() + 30
    while True:
        connection: psycopg.Connection[Any] | None = getattr(_local, "connection", None)
        try:
            if connection is None or connection.closed:
                connection = psycopg.connect(DATABASE_URL, autocommit=True, connect_timeout=2)
                _local.connection = connection
            connection.execute(
                "insert into effects (token, run_id, what, attempt, pid)"
                " values (%s, %s, %s, %s, %s) on conflict (token) do nothing",
                [token, str(run_id), what, attempt, os.getpid()],
            )
            return
        except psycopg.OperationalError:
            if connection is not None:
                connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _key(work: Work) -> str:
    return work.key


def _stepped(ctx: Any) -> None:
    for name in STEPS:

        def body(name: str = name) -> None:
            record(ctx.run_id, name, ctx.attempt)
            time.sleep(ctx.input.ms / 1000)

        ctx.step.run(name, body)


# three checkpointed steps; a kill may land anywhere in them
registry.job(
    name="stepped",
    input=Work,
    idempotency_key=_key,
    tenant="none",
    retry=RetryPolicy.of(attempts=100, delay="10ms"),
)(_stepped)

# the same with one attempt: only a drain's uncounted hand-back lets it run twice
registry.job(
    name="stepped-once",
    input=Work,
    idempotency_key=_key,
    tenant="none",
    retry=RetryPolicy.of(attempts=1),
)(_stepped)


@registry.job(
    name="tick",
    input=Work,
    idempotency_key=_key,
    tenant="none",
    retry=RetryPolicy.of(attempts=100, delay="10ms"),
)
def tick(ctx: Any) -> None:
    record(ctx.run_id, "ran", ctx.attempt)
    if ctx.input.ms:
        time.sleep(ctx.input.ms / 1000)


def _hooked_settled(settled: Any) -> None:
    # the hook records, then hangs: the test kills the worker inside it, after the ack landed
    record(settled.run_id, "hook", settled.attempt)
    time.sleep(60)


# a quick body whose on_settled hook is where the kill lands
@registry.job(
    name="hooked",
    input=Work,
    idempotency_key=_key,
    tenant="none",
    retry=RetryPolicy.of(attempts=100, delay="10ms"),
    on_settled=_hooked_settled,
)
def hooked(ctx: Any) -> None:
    record(ctx.run_id, "ran", ctx.attempt)


@registry.task(name="every-second", cron="* * * * * *", tz="UTC", catch_up="run-all")
def every_second(occurrence: Any) -> Any:
    return [(tick, {"key": f"second:{occurrence.isoformat()}"})]
