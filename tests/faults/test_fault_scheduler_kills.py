"""Schedulers racing for the lease while the leader is SIGKILLed, SIGSTOPped past its lease and
SIGTERMed: every occurrence of a once-a-second task fires, and fires once."""

from __future__ import annotations

import datetime as dt
import itertools
import signal
import time

from kit import APP, Process, query, value, wait_for, worker


def _leader_pid(url: str) -> int | None:
    rows = query(url, "select holder from jobs.scheduler_leases where expires_at > now()")
    return int(rows[0][0].split(":")[1]) if rows else None


def _scheduler(url: str, log) -> Process:
    # a 1.5 s lease: a silent leader is replaced within it
    return Process(["scheduler", "--app", APP, "--renew-every", "500ms", "--no-purge"], url, log)


def test_schedulers_racing_through_kills_and_stops_fire_every_occurrence_once(
    db, strength, tmp_path
):
    rounds = strength.pick(1, 3)
    nodes = {n: _scheduler(db.url, tmp_path / f"scheduler-{n}.log") for n in range(2)}
    running = worker(db.url, tmp_path / "worker.log")
    every = [*nodes.values(), running]
    spare = 2

    def leader() -> Process:
        wait_for(lambda: _leader_pid(db.url) is not None, timeout=30, what="a leader", show=every)
        pid = _leader_pid(db.url)
        [node] = [node for node in nodes.values() if node.pid == pid]
        return node

    def replaced(old: Process) -> None:
        wait_for(
            lambda: _leader_pid(db.url) not in (None, old.pid),
            timeout=10,
            what="another scheduler to take the lease",
            show=every,
        )

    try:
        for _ in range(rounds):
            time.sleep(2)
            killed = leader()
            killed.kill()
            replaced(killed)
            del nodes[next(n for n, node in nodes.items() if node is killed)]
            nodes[spare] = _scheduler(db.url, tmp_path / f"scheduler-{spare}.log")
            every.append(nodes[spare])
            spare += 1

            time.sleep(2)
            stopped = leader()
            stopped.signal(signal.SIGSTOP)  # frozen past its lease, then woken
            replaced(stopped)
            time.sleep(1)
            stopped.signal(signal.SIGCONT)
            wait_for(
                lambda stopped=stopped: "jobs.scheduler.demoted" in stopped.log.read_text(),
                timeout=10,
                what="the woken leader to see it was demoted",
                show=[stopped],
            )

        time.sleep(2)
        for node in list(nodes.values()):
            assert node.stop() == 0, node.tail()
        last_fire = value(db.url, "select max(created_at) from jobs.jobs")
        wait_for(
            lambda: value(db.url, "select count(*) from jobs.jobs where state <> 'done'") == 0,
            timeout=30,
            what="the fired jobs to run",
            show=[running],
        )
    finally:
        for process in [*nodes.values(), running]:
            if process.popen.poll() is None:
                process.stop()
    assert last_fire is not None

    fired = query(
        db.url,
        "select j.idempotency_key, count(distinct j.id), count(e.*) from jobs.jobs j"
        " left join effects e on e.run_id = j.run_id::text group by j.idempotency_key",
    )
    assert [key for key, jobs, _ in fired if jobs > 1] == [], "an occurrence fired twice"
    assert [key for key, _, ran in fired if ran != 1] == [], "an occurrence ran other than once"
    seconds = sorted(dt.datetime.fromisoformat(key.rsplit("second:", 1)[1]) for key, *_ in fired)
    gaps = [b for a, b in itertools.pairwise(seconds) if b - a != dt.timedelta(seconds=1)]
    assert gaps == [], f"occurrences missing before {gaps[:5]}"
    assert len(seconds) >= 6 * rounds
