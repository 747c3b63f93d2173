"""Rows for retention to purge: jobs run to done, then aged."""

from __future__ import annotations

from durajobs._values.states import StepStatus
from support.rows import fetch_all


def finished_job(client, key, *, run_id=None, step=True, queue="q-ret"):
    """A job run to done on `queue` (a step recorded first unless step=False); its id."""
    enqueued = client.enqueue("ret", {"key": key}, key, queue=queue, run_id=run_id)
    [claimed] = client.claim([queue], "w-ret", batch_size=1)
    assert claimed.id == enqueued.id
    if step:
        client.record_step(claimed.fence, "s1", StepStatus.COMPLETED)
    assert client.ack(claimed.fence)
    return enqueued.id


def age_finished(database_url, days):
    """Every finished job finished `days` ago, every published outbox row published then."""
    fetch_all(
        database_url,
        "update jobs.jobs set finished_at = now() - make_interval(days => %s)"
        " where finished_at is not null",
        (days,),
    )
    fetch_all(
        database_url,
        "update jobs.outbox set published_at = now() - make_interval(days => %s)"
        " where published_at is not null",
        (days,),
    )
