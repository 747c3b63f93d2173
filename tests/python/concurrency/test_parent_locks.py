"""Two sessions settling parents and children at once never deadlock (issue 21).

A settling child wakes its parent through the parent's advisory lock, taken after the
statement's own rows, and updates the parent row only when nobody holds it: a row lock on the
parent closed cycles with a batch that acks a parent and another's child, with a batch of
terminal nacks in another order, and with a cancel's cascade. Each case below lines the two
statements up with a share lock held on their rows for a moment, then lets both go; on the
row-lock version each one ended in `DeadlockDetected` after deadlock_timeout.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import psycopg


def _enqueue(connection, name, queue, *, id=None, parent=None):
    return connection.execute(
        "select (jobs.enqueue(name => %s, input => '{}'::jsonb, idempotency_key => %s,"
        " queue => %s, id => %s, parent_id => %s)).id",
        (name, str(uuid.uuid4()), queue, id, parent),
    ).fetchone()[0]


def _claim(connection, queue, worker):
    rows = connection.execute(
        "select id, claim from jobs.claim_v1(array[%s], %s, 10)", (queue, worker)
    ).fetchall()
    return dict(rows)


def _race(database_url, held: list[Any], *calls: tuple[str, tuple[Any, ...]]) -> list[str]:
    """Run each (sql, params) in a session of its own while `held` rows are share-locked, let
    them go together, and answer how each ended."""
    gate = psycopg.connect(database_url)
    gate.execute("select 1 from jobs.jobs_live where id = any(%s) for share", (held,))
    answers: list[str] = ["" for _ in calls]

    def run(index: int, sql: str, params: tuple[Any, ...]) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as session:
                session.execute("set deadlock_timeout = '200ms'")
                session.execute(sql, params).fetchall()
            answers[index] = "ok"
        except psycopg.Error as error:
            answers[index] = type(error).__name__

    threads = [
        threading.Thread(target=run, args=(index, sql, params))
        for index, (sql, params) in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # both are waiting on the gate, past their first rows
    gate.commit()
    gate.close()
    for thread in threads:
        thread.join(30)
    return answers


def test_two_ack_batches_of_crossed_parents_and_children_both_land(database_url):
    # each batch holds a parent and the other parent's child, in id order
    p1 = uuid.UUID("10000000-0000-4000-8000-000000000001")
    p2 = uuid.UUID("20000000-0000-4000-8000-000000000002")
    c2 = uuid.UUID("30000000-0000-4000-8000-000000000003")  # P2's child, run by A
    c1 = uuid.UUID("40000000-0000-4000-8000-000000000004")  # P1's child, run by B
    with psycopg.connect(database_url, autocommit=True) as s:
        _enqueue(s, "parent", "qa", id=p1)
        _enqueue(s, "parent", "qb", id=p2)
        _enqueue(s, "child", "qa", id=c2, parent=p2)
        _enqueue(s, "child", "qb", id=c1, parent=p1)
        a = _claim(s, "qa", "wA")
        b = _claim(s, "qb", "wB")

    answers = _race(
        database_url,
        [c1, c2],
        ("select * from jobs.ack_many_v1(%s, %s, %s)", ("wA", list(a), list(a.values()))),
        ("select * from jobs.ack_many_v1(%s, %s, %s)", ("wB", list(b), list(b.values()))),
    )

    assert answers == ["ok", "ok"]
    with psycopg.connect(database_url, autocommit=True) as s:
        states = s.execute(
            "select state, count(*) from jobs.jobs where id = any(%s) group by state",
            ([p1, p2, c1, c2],),
        ).fetchall()
    assert states == [("done", 4)]


def test_two_nack_batches_in_opposite_parent_orders_both_land(database_url):
    with psycopg.connect(database_url, autocommit=True) as s:
        p1 = _enqueue(s, "p", "qpar")
        p2 = _enqueue(s, "p", "qpar")
        c1, c2 = _enqueue(s, "c", "qx", parent=p1), _enqueue(s, "c", "qx", parent=p2)
        c3, c4 = _enqueue(s, "c", "qy", parent=p2), _enqueue(s, "c", "qy", parent=p1)
        x = _claim(s, "qx", "wx")
        y = _claim(s, "qy", "wy")

    def nacks(held, order):
        return json.dumps(
            [{"id": str(i), "claim": held[i], "next_state": "failed", "error": "x"} for i in order]
        )

    answers = _race(
        database_url,
        [c2, c4],
        ("select * from jobs.nack_many_v1(%s, %s::jsonb)", ("wx", nacks(x, [c1, c2]))),
        ("select * from jobs.nack_many_v1(%s, %s::jsonb)", ("wy", nacks(y, [c3, c4]))),
    )

    assert answers == ["ok", "ok"]


def test_a_cascading_cancel_and_a_grandchilds_ack_both_land(database_url):
    with psycopg.connect(database_url, autocommit=True) as s:
        top = _enqueue(s, "top", "qtop")
        middle = _enqueue(s, "middle", "qmid", parent=top)
        leaf = _enqueue(s, "leaf", "qleaf", parent=middle)
        held = _claim(s, "qleaf", "wl")

    answers = _race(
        database_url,
        [leaf],
        ("select jobs.cancel(%s, children => true)", (top,)),
        ("select * from jobs.ack_many_v1('wl', %s, %s)", (list(held), list(held.values()))),
    )

    assert answers == ["ok", "ok"]
    with psycopg.connect(database_url, autocommit=True) as s:
        (state,) = s.execute("select state from jobs.jobs where id = %s", [middle]).fetchone()
    assert state == "cancelled"


def test_a_batch_renewal_of_a_parent_and_its_childs_ack_both_land(database_url):
    with psycopg.connect(database_url, autocommit=True) as s:
        parent = _enqueue(s, "p", "qh", id=uuid.UUID("10000000-0000-4000-8000-0000000000aa"))
        child = _enqueue(
            s, "c", "qh", id=uuid.UUID("20000000-0000-4000-8000-0000000000bb"), parent=parent
        )
        held = _claim(s, "qh", "wh")
    assert set(held) == {parent, child}

    answers = _race(
        database_url,
        [child],
        (
            "select * from jobs.heartbeat_many_v1('wh', %s, %s)",
            ([parent, child], [held[parent], held[child]]),
        ),
        ("select * from jobs.ack_many_v1('wh', %s, %s)", ([child], [held[child]])),
    )

    assert answers == ["ok", "ok"]


def test_a_cascade_finds_grandchildren_committed_while_it_ran(database_url):
    # the child's attempt enqueues grandchildren in a transaction that commits while the
    # cancel of the top job waits for the child's row: the first pass read the tree before
    with psycopg.connect(database_url, autocommit=True) as s:
        top = _enqueue(s, "p", "qp")
        child = _enqueue(s, "c", "qc", parent=top)
        ((claimed, claim),) = _claim(s, "qc", "wc").items()
    assert claimed == child
    requests = [
        {"name": "g", "input": {}, "idempotency_key": f"g{n}-{uuid.uuid4()}", "queue": "qg"}
        for n in range(3)
    ]
    enqueuing = psycopg.connect(database_url)
    enqueuing.execute(
        "select * from jobs.enqueue_children_v1(%s, 'wc', %s, 'enqueue:g#1', %s::jsonb)",
        (child, claim, json.dumps(requests)),
    )
    answer: list[object] = []

    def cancel() -> None:
        with psycopg.connect(database_url, autocommit=True) as session:
            answer.append(
                session.execute("select jobs.cancel(%s, children => true)", (top,)).fetchone()
            )

    thread = threading.Thread(target=cancel)
    thread.start()
    time.sleep(0.5)  # the cancel waits for the child's row, which the step write holds
    enqueuing.commit()
    enqueuing.close()
    thread.join(30)

    assert answer == [(True,)]
    with psycopg.connect(database_url, autocommit=True) as s:
        states = s.execute(
            "select state, count(*) from jobs.jobs where parent_id = %s group by state", [child]
        ).fetchall()
    assert states == [("cancelled", 3)]


def _renewal_against(database_url: str, tag: str, other: Any, *, linked: bool) -> None:
    """Four rounds: a worker holds a parent and a later child (the child of the parent when
    `linked`); `other(parent, child, held)` answers a statement that races the worker's renewal
    of both, lined up on the parent so that either may take it first. Both must land."""
    for round in range(4):
        with psycopg.connect(database_url, autocommit=True) as s:
            queue = f"q{tag}{round}"
            parent = _enqueue(
                s, "p", queue, id=uuid.UUID(f"{tag}000000{round}-0000-4000-8000-0000000000aa")
            )
            child = _enqueue(
                s,
                "c",
                queue,
                id=uuid.UUID(f"{tag}100000{round}-0000-4000-8000-0000000000bb"),
                parent=parent if linked else None,
            )
            held = _claim(s, queue, "wr")
        assert set(held) == {parent, child}

        answers = _race(
            database_url,
            [parent],
            other(parent, child, held),
            (
                "select * from jobs.heartbeat_many_v1('wr', %s, %s)",
                ([parent, child], [held[parent], held[child]]),
            ),
        )

        assert answers == ["ok", "ok"], f"round {round}"


def test_a_cascading_cancel_and_a_batch_renewal_of_parent_and_child_both_land(database_url):
    """The renewal locks the parent, then the child (id order); the cancel locked the child,
    then the parent itself: a cycle whenever the renewal took the parent first."""
    _renewal_against(
        database_url,
        "1",
        lambda parent, _child, _held: ("select jobs.cancel(%s, children => true)", (parent,)),
        linked=True,
    )


def test_a_nack_batch_in_any_order_and_a_batch_renewal_both_land(database_url):
    """The renewal locks its rows in id order; a nack batch that arrives child first locked the
    child, then the parent: a cycle whenever the renewal took the parent first."""

    def nacks(parent: uuid.UUID, child: uuid.UUID, held: dict[uuid.UUID, int]) -> Any:
        batch = [{"id": str(i), "claim": held[i], "next_state": "ready"} for i in (child, parent)]
        return ("select * from jobs.nack_many_v1('wr', %s::jsonb)", (json.dumps(batch),))

    _renewal_against(database_url, "2", nacks, linked=False)
