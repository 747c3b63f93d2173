"""The settle counters under concurrent settles: each backend writes its own shard."""

from __future__ import annotations

import psycopg

import durajobs
from support.rows import fetch_all


def test_concurrent_settles_of_one_job_name_do_not_queue_on_one_counter_row(database_url):
    """Each backend writes its own shard: an ack held open in one session does not block an ack
    of the same job name in another."""
    with durajobs.Client.connect(database_url) as client:
        for key in ("one", "two"):
            client.enqueue("same", {}, key)
        first, second = client.claim(["default"], "w", batch_size=2)

    holder = psycopg.connect(database_url)
    try:
        holder_pid = holder.info.backend_pid
        assert holder.execute(*_ack(first)).fetchone() == (True,)  # its transaction stays open
        # another backend on a different shard (the shard is the backend pid mod 64)
        others = []
        while True:
            other = psycopg.connect(database_url, autocommit=True)
            others.append(other)
            if other.info.backend_pid % 64 != holder_pid % 64:
                break
        other.execute("set lock_timeout = '2s'")
        assert other.execute(*_ack(second)).fetchone() == (True,)
        holder.commit()
    finally:
        holder.close()
        for connection in others:
            connection.close()
    rows = fetch_all(
        database_url, "select shard, done from jobs.counter_buckets where name = 'same' order by 1"
    )
    assert sorted(done for _shard, done in rows) == [1, 1]
    assert len(rows) == 2


def _ack(claimed):
    return ("select jobs.ack_v1(%s, 'w', %s)", [claimed.id, claimed.claim])
