"""The low-level client: binding, decoding, error mapping, and joining the caller's transaction."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

import durajobs
from durajobs import errors
from durajobs._db import calls
from durajobs._values.states import StepStatus


def _count(client, where="true"):
    return client.connection.execute(f"select count(*) from jobs.jobs where {where}").fetchone()[0]


def test_input_is_stored_as_one_json_object_and_round_trips(client):
    payload = {"to": "zoë@example.com", "amount": 12.5, "lines": [{"sku": "a", "n": 2}], "x": None}
    job = client.enqueue("mail", payload, "mail:1")
    kind, stored = client.connection.execute(
        "select jsonb_typeof(input), input from jobs.jobs where id = %s", [job.id]
    ).fetchone()
    assert kind == "object"  # never a double-encoded string (R87)
    assert stored == payload
    assert client.claim(["default"], "w")[0].input == payload


@pytest.mark.parametrize(
    "queues",
    [["solo"], ["a,b", 'quo"te', "{brace}", "with space", "o'neil"]],
    ids=["one", "awkward-names"],
)
def test_queue_lists_bind_as_text_arrays(client, queues):
    """R88: a Python list binds as text[] whatever the names hold."""
    for queue in queues:
        client.enqueue("n", {}, f"k:{queue}", queue=queue)
    claimed = client.claim(queues, "w", batch_size=10)
    assert sorted(job.queue for job in claimed) == sorted(queues)


def test_an_unknown_step_status_is_refused_when_read(client):
    """R22: a status a newer release wrote is never read as 'not completed'."""
    job = client.enqueue("n", {}, "k")
    client.connection.execute(
        """insert into jobs.steps (run_id, name, status, started_at, updated_at)
           values (%s, 'charge', 'archived', now(), now())""",
        [job.run_id],
    )
    with pytest.raises(errors.JobRowStatusUnknown) as raised:
        client.steps(job.run_id)
    assert raised.value.detail["value"] == "archived"
    assert raised.value.detail["column"] == "status"


def test_sql_errors_arrive_as_their_classes_with_detail_and_fix(client):
    first = client.enqueue("n", {}, "dup")
    with pytest.raises(errors.JobDuplicate) as duplicate:
        client.enqueue("n", {}, "dup", on_conflict="error")
    assert duplicate.value.detail["existing_id"] == str(first.id)
    assert duplicate.value.hint
    assert str(duplicate.value).startswith("X_JOB_DUPLICATE: ")

    with pytest.raises(errors.ArgumentInvalid) as invalid:
        client.enqueue("n", {}, "k", max_attempts=0)
    assert invalid.value.detail["argument"] == "max_attempts"
    with pytest.raises(errors.JobInputInvalid):
        client.enqueue("n", [1, 2], "k")  # type: ignore[arg-type]
    with pytest.raises(errors.IdempotencyRequired):
        client.enqueue("n", {}, "")
    with pytest.raises(errors.JobNotFound):
        client.requeue(uuid.uuid4())
    with pytest.raises(errors.JobNotRequeueable):
        client.requeue(first.id)
    with pytest.raises(errors.ClaimQueuesEmpty):
        # straight to SQL, past the builder's own check
        durajobs.execute(
            client.connection,
            calls.Call("jobs.claim_v1", "select jobs.claim_v1('{}', 'w')", {}, list),
        )
    with pytest.raises(errors.ClaimQueuesEmpty):
        client.claim([], "w")


def test_step_errors_arrive_as_their_classes(client):
    job = client.enqueue("n", {}, "k")
    claimed = client.claim(["default"], "w")[0]
    client.record_step(claimed.fence, "a", StepStatus.COMPLETED, output={"v": 1})
    with pytest.raises(errors.StepDuplicate):
        client.record_step(claimed.fence, "a", StepStatus.COMPLETED, output={"v": 2})
    assert [s.output for s in client.steps(job.run_id)] == [{"v": 1}]

    client.connection.execute("update jobs.jobs set state = 'cancelled' where id = %s", [job.id])
    with pytest.raises(errors.JobCancelled):
        client.record_step(claimed.fence, "b", StepStatus.COMPLETED)
    assert client.heartbeat(claimed.fence) is durajobs.HeartbeatAnswer.CANCELLED


def test_an_insert_that_no_row_explains_is_driver_unavailable(client):
    """Two conflicting inserts and no live holder found: bounded, with its own code."""
    client.enqueue("n", {}, "k")
    client.connection.execute(
        """create or replace function jobs._find_live(name text, tenant_id text,
                                                      idempotency_key text)
           returns jobs.enqueue_result language sql as 'select null::jobs.enqueue_result'"""
    )
    with pytest.raises(errors.DriverUnavailable):
        client.enqueue("n", {}, "k")
    assert _count(client) == 1


def test_a_refused_batch_stores_nothing(client):
    client.enqueue("n", {}, "kept")
    requests = [
        {"name": "n", "input": {}, "idempotency_key": "fine"},
        {"name": "n", "input": {}, "idempotency_key": None},
    ]
    with pytest.raises(errors.IdempotencyRequired):
        client.enqueue_many(requests)
    assert _count(client) == 1


def test_calls_join_the_callers_transaction(database_url, client):
    with psycopg.connect(database_url) as connection:
        inside = durajobs.Client(connection, check=False)
        inside.enqueue("n", {}, "rolled-back")
        connection.rollback()
        inside.enqueue("n", {}, "committed")
        connection.commit()
    assert _count(client, "idempotency_key = 'rolled-back'") == 0
    assert _count(client, "idempotency_key = 'committed'") == 1


def test_the_async_executor_runs_the_same_builders(database_url):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await durajobs._db.execute.check_schema_async(conn)
            job = await durajobs.execute_async(conn, calls.enqueue("n", {"a": 1}, "k"))
            claimed = await durajobs.execute_async(conn, calls.claim(["default"], "w"))
            assert claimed[0].id == job.id
            acked = await durajobs.execute_async(conn, calls.ack(claimed[0].fence))
            await durajobs.execute_async(conn, calls.enqueue("n", {}, "dup"))
            with pytest.raises(errors.JobDuplicate):
                await durajobs.execute_async(
                    conn, calls.enqueue("n", {}, "dup", on_conflict="error")
                )
            return claimed[0].input, acked

    assert asyncio.run(scenario()) == ({"a": 1}, True)


def test_queue_stats_counts_a_shed_as_ready_and_a_park_as_suspended(client):
    """R9: a shed stays in the ready bucket; a park leaves it."""
    shed, parked = client.enqueue("n", {}, "shed"), client.enqueue("n", {}, "park")
    claimed = {job.id: job for job in client.claim(["default"], "w", batch_size=2)}
    assert client.nack(claimed[shed.id].fence, counts_as_attempt=False)
    assert client.nack(
        claimed[parked.id].fence,
        next_state=durajobs.NackTarget.SUSPENDED,
        counts_as_attempt=False,
    )
    (stat,) = client.queue_stats(["default"])
    assert (stat.ready, stat.suspended, stat.running) == (1, 1, 0)
    row = client.connection.execute(
        "select attempt, last_error from jobs.jobs where id = %s", [shed.id]
    ).fetchone()
    assert row == (0, None)
