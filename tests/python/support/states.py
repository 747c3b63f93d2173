"""Jobs put in given states through the client, as the operator commands find them: each
helper answers the job's id (claimed_job: the claimed row)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from durajobs._values.states import NackTarget


def ready_job(client, key, name="op", **options):
    return client.enqueue(name, {"key": key}, key, **options).id


def delayed_job(client, key, **options):
    return ready_job(client, key, run_at=datetime.now(UTC) + timedelta(hours=1), **options)


def claimed_job(client, key, queue, name="op", worker="w-1", **options):
    ready_job(client, key, name=name, queue=queue, **options)
    [claimed] = client.claim([queue], worker, batch_size=1)
    assert claimed.input == {"key": key}
    return claimed


def failed_job(client, key, queue, name="op", max_attempts=5):
    """A job whose first attempt failed, with an error, a code and a stack."""
    claimed = claimed_job(client, key, queue, name=name, max_attempts=max_attempts)
    client.nack(
        claimed.fence,
        error="the mail server said no",
        error_code="X_MAIL_REFUSED",
        error_stack="Traceback (most recent call last):\n  File 'send.py'\nRefused",
    )
    return claimed.id


def dead_job(client, key, queue="graveyard", name="op"):
    claimed = claimed_job(client, key, queue, name=name, max_attempts=1)
    client.nack(claimed.fence, next_state=NackTarget.DEAD, error="no", error_code="X_NO")
    return claimed.id


def done_job(client, key, queue="finished", name="op"):
    claimed = claimed_job(client, key, queue, name=name)
    assert client.ack(claimed.fence)
    return claimed.id


def stored_row(client, id) -> Any:
    """The job's whole row as stored, or None."""
    return client.connection.execute("select * from jobs.jobs where id = %s", [id]).fetchone()


def stored_state(client, id) -> Any:
    return client.connection.execute("select state from jobs.jobs where id = %s", [id]).fetchone()
