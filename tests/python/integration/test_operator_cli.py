"""The operator commands (`durajobs jobs|queues|tasks|workers|counters`) against a real Postgres.

The tests call `durajobs.cli.main` in this process and read what it printed; the command as a
real process is processes/test_cli, its parser alone unit/test_cli_offline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from durajobs._db import calls
from durajobs._values.states import StepStatus
from durajobs.cli import main
from durajobs.display.inspection import job_detail
from support.apps import OPERATOR_APP
from support.paths import TESTS
from support.states import (
    claimed_job,
    dead_job,
    delayed_job,
    done_job,
    failed_job,
    ready_job,
    stored_row,
    stored_state,
)

SUMMARY_KEYS = {
    "id",
    "run_id",
    "name",
    "queue",
    "state",
    "tenant_id",
    "attempt",
    "max_attempts",
    "priority",
    "run_at",
    "created_at",
    "updated_at",
    "finished_at",
    "last_error",
    "last_error_code",
}
STEP_KEYS = {
    "name",
    "status",
    "attempts",
    "started_at",
    "updated_at",
    "finished_at",
    "wake_at",
    "duration_ms",
    "output_bytes",
    "error",
}
TALLY_KEYS = {"done", "retried", "failed", "dead", "duration_ms", "avg_duration_ms"}


# -- running the command --------------------------------------------------------------------


class Ran:
    def __init__(self, status, out, err):
        self.status, self.out, self.err = status, out, err

    def json(self):
        assert self.status == 0, self.err
        return json.loads(self.out)


@pytest.fixture
def durajobs(database_url, capsys):
    """Run `durajobs ARGS --database-url <the test database>` in this process."""

    def run(*args):
        status = main([*args, "--database-url", database_url])
        captured = capsys.readouterr()
        return Ran(status, captured.out, captured.err)

    return run


def _refused(ran, code):
    """A refusal: exit 1, the code and a fix on stderr, nothing on stdout."""
    assert ran.status == 1, ran.out
    assert ran.out == ""
    assert f"error: {code}" in ran.err
    assert "\nfix: " in ran.err
    assert f"\nsee: docs/errors.md#{code.lower()}" in ran.err
    return ran.err


def _instant(text):
    instant = datetime.fromisoformat(text)
    assert instant.tzinfo is not None
    return instant


# -- jobs list ------------------------------------------------------------------------------


def test_list_prints_a_table_of_the_page_and_how_to_get_the_next(client, durajobs):
    ids = [ready_job(client, f"k{n}", queue="emails") for n in range(3)]
    dead = dead_job(client, "gone")

    ran = durajobs("jobs", "list", "--limit", "2")
    assert ran.status == 0, ran.err
    header, first, second, hint = ran.out.splitlines()
    assert header.split() == ["ID", "NAME", "QUEUE", "STATE", "ATTEMPT", "CREATED", "ERROR"]
    assert first.split()[:5] == [str(dead), "op", "graveyard", "dead", "1/1"]
    assert first.split()[-1] == "X_NO"
    assert second.split()[:5] == [str(ids[2]), "op", "emails", "ready", "0/20"]
    assert hint == f"next page: the same command with --after {ids[2]}"

    last = durajobs("jobs", "list", "--limit", "3", "--after", str(ids[2]))  # a short page
    assert [line.split()[0] for line in last.out.splitlines()[1:3]] == [str(ids[1]), str(ids[0])]
    assert "last page" in last.out
    assert f"newer rows: the same command with --before {ids[1]}" in last.out

    assert durajobs("jobs", "list", "--state", "cancelled").out == "no jobs match\n"


def test_list_json_has_exactly_the_documented_shape(client, durajobs):
    id = delayed_job(client, "later", queue="emails", tenant_id="acme", priority=3)

    answer = durajobs("jobs", "list", "--json").json()
    assert set(answer) == {"jobs", "next_after", "prev_before"}
    assert answer["next_after"] is None  # a short first page: nothing older, nothing newer
    assert answer["prev_before"] is None
    [job] = answer["jobs"]
    assert set(job) == SUMMARY_KEYS
    assert UUID(job["id"]) == id
    assert isinstance(UUID(job["run_id"]), UUID)
    assert {
        key: job[key] for key in SUMMARY_KEYS - {"id", "run_id"} if not key.endswith("_at")
    } == {
        "name": "op",
        "queue": "emails",
        "state": "delayed",
        "tenant_id": "acme",
        "attempt": 0,
        "max_attempts": 20,
        "priority": 3,
        "last_error": None,
        "last_error_code": None,
    }
    assert _instant(job["run_at"]) > _instant(job["created_at"]) + timedelta(minutes=59)
    assert _instant(job["updated_at"]) == _instant(job["created_at"])
    assert job["finished_at"] is None


def test_list_filters_by_each_option(client, durajobs):
    emails = ready_job(client, "e", queue="emails", tenant_id="acme")
    other = ready_job(client, "o", name="other", tenant_id="zenith")
    dead = dead_job(client, "d")

    def listed(*options):
        return [
            UUID(job["id"]) for job in durajobs("jobs", "list", "--json", *options).json()["jobs"]
        ]

    assert listed("--queue", "emails") == [emails]
    assert listed("--name", "other") == [other]
    assert listed("--state", "dead") == [dead]
    assert listed("--tenant", "zenith") == [other]
    assert listed("--id-prefix", str(emails)[:-4].upper()) == [emails]
    created = _instant(durajobs("jobs", "list", "--json").json()["jobs"][1]["created_at"])
    assert listed("--created-to", created.isoformat()) == [other, emails]
    assert listed("--created-from", created.isoformat()) == [dead, other]
    assert listed("--key", "o") == [other]
    assert listed("--run", str(dead)) == [dead]


def test_pages_walk_forward_then_back_without_repeats(client, durajobs):
    ids = [ready_job(client, f"k{n}") for n in range(7)]
    newest_first = list(reversed(ids))

    forward, pages, cursor = [], [], []
    while True:
        page = durajobs("jobs", "list", "--json", "--limit", "3", *cursor).json()
        pages.append(page)
        forward += [UUID(job["id"]) for job in page["jobs"]]
        if page["next_after"] is None:
            break
        cursor = ["--after", page["next_after"]]
    assert forward == newest_first
    assert [len(page["jobs"]) for page in pages] == [3, 3, 1]

    backward, page = [], pages[-1]
    backward = [UUID(job["id"]) for job in page["jobs"]]
    while page["prev_before"] is not None:
        page = durajobs("jobs", "list", "--json", "--limit", "3", "--before", page["prev_before"])
        page = page.json()
        backward = [UUID(job["id"]) for job in page["jobs"]] + backward
    assert backward == newest_first


def test_a_bad_page_or_instant_is_refused_with_its_fix(client, durajobs):
    id = ready_job(client, "k")
    err = _refused(durajobs("jobs", "list", "--limit", "201"), "X_JOB_PAGE_INVALID")
    assert "fix: durajobs jobs list --limit 100 --after <last id printed>" in err
    _refused(
        durajobs("jobs", "list", "--after", str(id), "--before", str(id)), "X_JOB_PAGE_INVALID"
    )
    _refused(durajobs("jobs", "list", "--after", str(UUID(int=1))), "X_JOB_PAGE_INVALID")
    err = _refused(durajobs("jobs", "list", "--created-from", "2026-01-01"), "X_ARGUMENT_INVALID")
    assert "--created-from needs a time zone" in err
    _refused(durajobs("jobs", "list", "--state", "sleeping"), "X_ARGUMENT_INVALID")


# -- jobs show ------------------------------------------------------------------------------


def _traced_job(client):
    """A job on its second attempt: a failed first attempt, two steps, progress reported."""
    id = failed_job(client, "traced", "emails")
    [claimed] = client.claim(["emails"], "w-2")
    client.record_step(claimed.fence, "render", StepStatus.COMPLETED, output={"n": 1})
    client.record_step(claimed.fence, "send", StepStatus.COMPLETED, output="sent")
    client.run(calls.progress(claimed.fence, 3, 10, "three of ten"))
    return id


def test_show_prints_the_row_its_error_steps_and_progress(client, durajobs):
    id = _traced_job(client)
    client.pause_queue("emails")

    ran = durajobs("jobs", "show", str(id))
    assert ran.status == 0, ran.err
    lines = ran.out.splitlines()
    assert f"id:              {id}" in lines
    assert "queue:           emails (paused)" in lines
    assert "state:           running" in lines
    assert "attempt:         2/5" in lines
    assert any(line.startswith("claimed by:      w-2 (claim 2, lease until ") for line in lines)
    assert any(line.startswith("progress:        3/10 (30%) three of ten at ") for line in lines)
    assert "last error:      X_MAIL_REFUSED: the mail server said no" in lines
    assert "stack:" in lines
    assert "  Refused" in lines
    steps = lines.index("steps:")
    assert lines[steps + 1].split() == ["NAME", "STATUS", "ATTEMPTS", "DURATION", "OUTPUT", "ERROR"]
    assert lines[steps + 2].split()[:3] == ["render", "completed", "1"]
    assert lines[steps + 2].split()[-3:] == ["8", "B", "-"]  # {"n": 1}
    assert lines[steps + 3].split()[:3] == ["send", "completed", "1"]
    assert lines[-1] == "retries ahead: unknown: pass --app module:registry"


def test_show_json_is_the_job_detail(client, durajobs):
    id = _traced_job(client)

    answer = durajobs("jobs", "show", str(id), "--json").json()
    assert answer == json.loads(json.dumps(job_detail(client.inspect_job(id)).as_json()))
    assert set(answer) == {
        "job",
        "steps",
        "queue_paused",
        "retries_ahead",
        "limit",
        "rules",
        "backfill",
        "children",
    }
    assert answer["limit"] is None, "the job declares no concurrency limit"
    assert answer["backfill"] is None, "the job is not a backfill's"
    assert answer["rules"] == [], "no limit set in SQL counts it"
    assert answer["job"]["id"] == str(id)
    assert answer["job"]["progress"]["note"] == "three of ten"
    assert answer["queue_paused"] is False
    assert answer["retries_ahead"] is None
    assert [set(step) for step in answer["steps"]] == [STEP_KEYS, STEP_KEYS]
    assert [(step["name"], step["output_bytes"]) for step in answer["steps"]] == [
        ("render", 8),
        ("send", 6),
    ]


def test_show_hides_the_values_of_secret_input_keys_in_text_and_json(client, durajobs):
    """An operator reading a job sees no password, token, secret, authorization or api key of
    its input (nor a key the application declared), with or without --json; the row keeps
    them (017_redaction)."""
    job = client.enqueue(
        "signup",
        {"email": "a@b.c", "password": "hunter2", "auth": {"api_key": "k-1"}, "ssn": "1-2-3"},
        "su-1",
    )
    client.run(calls.redact_keys(["ssn"]))

    answer = durajobs("jobs", "show", str(job.id), "--json").json()
    assert answer["job"]["input"] == {
        "email": "a@b.c",
        "password": "[redacted]",
        "auth": {"api_key": "[redacted]"},
        "ssn": "[redacted]",
    }
    human = durajobs("jobs", "show", str(job.id)).out
    assert "hunter2" not in human
    assert "k-1" not in human
    stored = client.connection.execute(
        "select input ->> 'password' from jobs.jobs where id = %s", [job.id]
    ).fetchone()
    assert stored == ("hunter2",)


def test_show_with_app_computes_the_retries_ahead(client, durajobs, monkeypatch):
    monkeypatch.chdir(TESTS)  # --app modules import from the working directory, as in a shell
    id = failed_job(client, "flaky-1", "flaky", name="flaky", max_attempts=4)

    answer = durajobs("jobs", "show", str(id), "--app", OPERATOR_APP, "--json").json()
    # attempt 1 failed; 2s doubling: after attempt 2 wait 4s, after attempt 3 wait 8s, 4 is last
    assert answer["retries_ahead"] == [
        {"after_attempt": 2, "delay_seconds": 4.0},
        {"after_attempt": 3, "delay_seconds": 8.0},
    ]
    human = durajobs("jobs", "show", str(id), "--app", OPERATOR_APP).out.splitlines()
    assert human[-3:] == [
        "retries ahead: 2 (before jitter)",
        "  after attempt 2: wait 4s",
        "  after attempt 3: wait 8s",
    ]

    undeclared = ready_job(client, "plain")
    human = durajobs("jobs", "show", str(undeclared), "--app", OPERATOR_APP).out.splitlines()
    assert human[-1] == f"retries ahead: unknown: op is not declared in {OPERATOR_APP}"
    done = done_job(client, "over", name="flaky")
    assert durajobs("jobs", "show", str(done), "--app", OPERATOR_APP).out.splitlines()[-1] == (
        "retries ahead: none"
    )


def test_show_of_an_unknown_job_is_refused(durajobs):
    err = _refused(durajobs("jobs", "show", str(UUID(int=7))), "X_JOB_NOT_FOUND")
    assert "durajobs jobs list --id-prefix" in err


# -- jobs cancel, requeue, remove, promote --------------------------------------------------


def test_cancel_stops_a_live_job(client, durajobs):
    ready, running = ready_job(client, "a"), claimed_job(client, "b", "emails").id

    ran = durajobs("jobs", "cancel", str(ready), "--reason", "customer left")
    assert ran.out == f"cancelled job {ready}\n"
    assert durajobs("jobs", "cancel", str(running), "--json").json() == {
        "id": str(running),
        "action": "cancelled",
        "ok": True,
    }
    rows = client.connection.execute(
        "select id, state, last_error from jobs.jobs where id = any(%s) order by id",
        [[ready, running]],
    ).fetchall()
    assert sorted(rows) == sorted(
        [(ready, "cancelled", "cancelled: customer left"), (running, "cancelled", "cancelled")]
    )


def test_cancel_refuses_a_finished_or_unknown_job_and_changes_nothing(client, durajobs):
    done = done_job(client, "d")
    before = stored_row(client, done)
    err = _refused(durajobs("jobs", "cancel", str(done)), "X_JOB_NOT_CANCELLABLE")
    assert f"durajobs jobs requeue {done}" in err
    assert stored_row(client, done) == before
    # an unknown id is not cancellable either, with the same code as from SQL
    _refused(durajobs("jobs", "cancel", str(UUID(int=9))), "X_JOB_NOT_CANCELLABLE")


def test_requeue_runs_a_finished_job_again_from_a_step(client, durajobs):
    claimed = claimed_job(client, "steps", "emails")
    for step in ("one", "two", "three"):
        client.record_step(claimed.fence, step, StepStatus.COMPLETED)
    client.ack(claimed.fence)

    ran = durajobs("jobs", "requeue", str(claimed.id), "--from-step", "two")
    assert ran.out == f"requeued job {claimed.id} from step two\n"
    assert [step.name for step in client.steps(claimed.run_id)] == ["one"]
    assert stored_state(client, claimed.id) == ("ready",)

    dead = dead_job(client, "dead")
    assert durajobs("jobs", "requeue", str(dead), "--json").json() == {
        "id": str(dead),
        "action": "requeued",
        "ok": True,
    }
    assert client.connection.execute(
        "select state, attempt, last_error from jobs.jobs where id = %s", [dead]
    ).fetchone() == ("ready", 0, None)


def test_requeue_refusals_change_nothing(client, durajobs):
    live = ready_job(client, "live")
    before = stored_row(client, live)
    err = _refused(durajobs("jobs", "requeue", str(live)), "X_JOB_NOT_REQUEUEABLE")
    assert f"durajobs jobs cancel {live}" in err
    assert stored_row(client, live) == before

    finished = done_job(client, "twin")
    twin = ready_job(client, "twin")  # a live job now holds the finished one's key
    before = stored_row(client, finished)
    err = _refused(durajobs("jobs", "requeue", str(finished)), "X_JOB_DUPLICATE")
    assert f"durajobs jobs show {twin}" in err
    assert stored_row(client, finished) == before

    dead = dead_job(client, "dead")
    before = stored_row(client, dead)
    _refused(durajobs("jobs", "requeue", str(dead), "--from-step", "nope"), "X_ARGUMENT_INVALID")
    assert stored_row(client, dead) == before
    _refused(durajobs("jobs", "requeue", str(UUID(int=3))), "X_JOB_NOT_FOUND")


def test_remove_deletes_a_job_but_not_a_running_one(client, durajobs):
    dead = dead_job(client, "dead")
    assert durajobs("jobs", "remove", str(dead), "--json").json() == {
        "id": str(dead),
        "action": "removed",
        "ok": True,
    }
    assert stored_row(client, dead) is None
    _refused(durajobs("jobs", "remove", str(dead)), "X_JOB_NOT_FOUND")

    running = claimed_job(client, "running", "emails").id
    before = stored_row(client, running)
    err = _refused(durajobs("jobs", "remove", str(running)), "X_JOB_NOT_REMOVABLE")
    assert f"durajobs jobs cancel {running}" in err
    assert stored_row(client, running) == before


def test_promote_makes_a_delayed_job_due_but_not_a_due_one(client, durajobs):
    later = delayed_job(client, "later")
    assert durajobs("jobs", "promote", str(later)).out == f"promoted job {later}\n"
    state, due = client.connection.execute(
        "select state, run_at <= now() from jobs.jobs where id = %s", [later]
    ).fetchone()
    assert (state, due) == ("ready", True)

    before = stored_row(client, later)
    _refused(durajobs("jobs", "promote", str(later)), "X_JOB_NOT_PROMOTABLE")
    assert stored_row(client, later) == before
    _refused(durajobs("jobs", "promote", str(UUID(int=5)), "--json"), "X_JOB_NOT_FOUND")


def test_drain_ends_a_live_job_as_done_counted_nowhere(client, durajobs):
    job = client.enqueue("by-hand", {}, "settled-at-the-counter")
    assert durajobs("jobs", "drain", str(job.id), "--json").json() == {
        "id": str(job.id),
        "action": "drained",
        "ok": True,
    }
    assert client.connection.execute(
        "select state, attempt from jobs.jobs where id = %s", [job.id]
    ).fetchone() == ("done", 0)
    assert client.counter_totals() == []

    before = stored_row(client, job.id)
    _refused(durajobs("jobs", "drain", str(job.id)), "X_JOB_NOT_DRAINABLE")
    assert stored_row(client, job.id) == before
    _refused(durajobs("jobs", "drain", str(UUID(int=6)), "--json"), "X_JOB_NOT_FOUND")


# -- jobs bulk ------------------------------------------------------------------------------


def test_bulk_runs_once_or_until_done(client, durajobs):
    client.enqueue_many(
        [{"name": "bulk", "input": {}, "idempotency_key": f"k{n}"} for n in range(1005)]
    )
    assert durajobs("jobs", "bulk", "remove", "--state", "ready", "--json").json() == {
        "action": "removed",
        "affected": 1000,
        "remaining": 5,
        "calls": 1,
    }
    client.enqueue_many(
        [{"name": "bulk", "input": {}, "idempotency_key": f"again{n}"} for n in range(1000)]
    )
    ran = durajobs("jobs", "bulk", "remove", "--state", "ready", "--name", "bulk", "--until-done")
    assert ran.out == "removed 1005 ready job(s) in 2 call(s); 0 remaining\n"
    assert client.connection.execute("select count(*) from jobs.jobs").fetchone() == (0,)


def test_bulk_requeue_and_promote_filter_by_queue_name_and_tenant(client, durajobs):
    dead = [dead_job(client, f"d{n}", queue="graveyard") for n in range(2)]
    spared = dead_job(client, "elsewhere", queue="other")
    assert durajobs(
        "jobs",
        "bulk",
        "requeue",
        "--state",
        "dead",
        "--queue",
        "graveyard",
        "--until-done",
        "--json",
    ).json() == {"action": "requeued", "affected": 2, "remaining": 0, "calls": 1}
    assert [stored_state(client, id) for id in dead] == [("ready",), ("ready",)]
    assert stored_state(client, spared) == ("dead",)

    later = delayed_job(client, "acme", tenant_id="acme")
    delayed_job(client, "zenith", tenant_id="zenith")
    ran = durajobs("jobs", "bulk", "promote", "--state", "delayed", "--tenant", "acme")
    assert ran.out == "promoted 1 delayed job(s) in 1 call(s); 0 remaining\n"
    assert stored_state(client, later) == ("ready",)


def test_bulk_refuses_a_state_it_cannot_act_on(client, durajobs):
    running = claimed_job(client, "r", "emails").id
    before = stored_row(client, running)
    _refused(durajobs("jobs", "bulk", "remove", "--state", "running"), "X_ARGUMENT_INVALID")
    assert stored_row(client, running) == before


# -- queues ---------------------------------------------------------------------------------


QUEUE_KEYS = {
    "queue",
    "ready",
    "delayed",
    "running",
    "suspended",
    "dead",
    "oldest_ready_age_seconds",
    "paused",
    "depth",
}


def test_queues_list_joins_the_stats_with_the_depth(client, durajobs):
    for n in range(2):
        ready_job(client, f"r{n}", queue="emails")
    delayed_job(client, "later", queue="emails")
    claimed_job(client, "running", "reports")
    dead_job(client, "dead", queue="reports")
    ready_job(client, "held", queue="paused")
    client.pause_queue("paused")

    answer = durajobs("queues", "--json").json()
    assert list(answer) == ["queues", "horizon"]
    assert answer["horizon"] is None, "nothing holds this database's horizon"
    assert [set(queue) for queue in answer["queues"]] == [QUEUE_KEYS] * 3
    by_queue = {queue.pop("queue"): queue for queue in answer["queues"]}
    ages = {name: queue.pop("oldest_ready_age_seconds") for name, queue in by_queue.items()}
    assert by_queue == {
        "emails": {
            "ready": 2,
            "delayed": 1,
            "running": 0,
            "suspended": 0,
            "dead": 0,
            "paused": False,
            "depth": 2,
        },
        "paused": {
            "ready": 1,
            "delayed": 0,
            "running": 0,
            "suspended": 0,
            "dead": 0,
            "paused": True,
            "depth": 0,  # paused: more workers would not drain it
        },
        "reports": {
            "ready": 0,
            "delayed": 0,
            "running": 1,
            "suspended": 0,
            "dead": 1,
            "paused": False,
            "depth": 1,
        },
    }
    assert isinstance(ages["emails"], float)
    assert ages["emails"] >= 0
    assert ages["reports"] is None

    ran = durajobs("queues", "list")
    bare = durajobs("queues")
    without_age = [line.split()[:6] + line.split()[7:] for line in bare.out.splitlines()]
    assert [line.split()[:6] + line.split()[7:] for line in ran.out.splitlines()] == without_age
    *table, horizon = ran.out.splitlines()
    assert horizon == "xmin horizon: nothing holds it"
    header, *rows = table
    assert header.split() == [
        "QUEUE",
        "READY",
        "DELAYED",
        "RUNNING",
        "SUSPENDED",
        "DEAD",
        "OLDEST",
        "PAUSED",
        "DEPTH",
    ]
    assert [row.split()[0] for row in rows] == ["emails", "paused", "reports"]
    assert rows[1].split()[-2:] == ["yes", "0"]


def test_queues_pause_and_resume_say_whether_they_changed_anything(client, durajobs):
    ran = durajobs("queues", "pause", "emails", "--by", "oncall")
    assert ran.out == "paused queue emails\n"
    assert client.connection.execute(
        "select queue, paused_by from jobs.queue_pauses"
    ).fetchall() == [("emails", "oncall")]
    # --json given to the parent command survives the subcommand
    assert durajobs("queues", "--json", "pause", "emails").json() == {
        "queue": "emails",
        "action": "paused",
        "changed": False,
    }
    assert durajobs("queues", "resume", "emails", "--json").json() == {
        "queue": "emails",
        "action": "resumed",
        "changed": True,
    }
    assert durajobs("queues", "resume", "emails").out == "queue emails was not paused\n"
    assert client.connection.execute("select count(*) from jobs.queue_pauses").fetchone() == (0,)


def test_queues_depth_prints_the_autoscaler_numbers(client, durajobs):
    for n in range(3):
        ready_job(client, f"e{n}", queue="emails")
    delayed_job(client, "later", queue="emails")  # not due: no demand yet
    client.run(calls.worker_announce("w-drain", host="box", pid=7, queues=["reports"], slots=2))
    claimed_job(client, "held", "reports", worker="w-drain")
    claimed_job(client, "busy", "reports", worker="w-1")
    client.run(calls.worker_draining("w-drain"))

    assert durajobs("queues", "depth", "emails").out == "3\n"
    assert durajobs("queues", "depth", "reports", "none", "emails").out == "1\n0\n3\n"
    assert durajobs("queues", "depth").out == "emails 3\nreports 1\n"
    assert durajobs("queues", "depth", "reports", "none", "--json").json() == [
        {"queue": "reports", "running": 2, "due": 0, "draining_held": 1, "depth": 1},
        {"queue": "none", "running": 0, "due": 0, "draining_held": 0, "depth": 0},
    ]


# -- tasks ----------------------------------------------------------------------------------


def test_tasks_list_pause_and_resume(client, durajobs):
    assert durajobs("tasks").out == "no task armed (a scheduler arms its registry's tasks)\n"
    watermark = datetime(2026, 1, 1, tzinfo=UTC)
    client.run(calls.scheduler_arm("nightly", watermark))
    client.run(calls.scheduler_arm("hourly", watermark))

    assert durajobs("tasks", "pause", "nightly").out == "paused task nightly\n"
    assert durajobs("tasks", "pause", "nightly", "--json").json() == {
        "task": "nightly",
        "action": "paused",
        "changed": False,
    }
    answer = durajobs("tasks", "list", "--json").json()
    assert answer == {
        "tasks": [
            {
                "task": task,
                "watermark": watermark.isoformat(),
                "last_fired_occurrence": None,
                "last_fired_at": None,
                "paused": paused,
            }
            for task, paused in (("hourly", False), ("nightly", True))
        ]
    }
    header, hourly, nightly = durajobs("tasks").out.splitlines()
    assert header.split() == ["TASK", "WATERMARK", "LAST", "OCCURRENCE", "LAST", "FIRED", "PAUSED"]
    assert hourly.split() == ["hourly", "2026-01-01", "00:00:00+00:00", "-", "-", "no"]
    assert nightly.split()[-1] == "yes"

    assert durajobs("tasks", "--json", "resume", "nightly").json()["changed"] is True
    _refused(durajobs("tasks", "pause", "weekly"), "X_ARGUMENT_INVALID")


# -- workers --------------------------------------------------------------------------------


def test_workers_lists_the_live_registry(client, durajobs):
    assert durajobs("workers").out == "no live worker\n"
    client.run(
        calls.worker_announce("w-a", host="box-1", pid=41, queues=["emails", "reports"], slots=8)
    )
    client.run(calls.worker_announce("w-b", host="box-2", pid=42, queues=["emails"], slots=2))
    held = claimed_job(client, "held", "emails", worker="w-a").id
    client.run(calls.worker_heartbeat("w-a", [held]))
    client.run(calls.worker_draining("w-b"))

    answer = durajobs("workers", "--json").json()
    assert list(answer) == ["workers"]
    a, b = answer["workers"]
    assert set(a) == {
        "id",
        "host",
        "pid",
        "queues",
        "slots",
        "in_flight",
        "in_flight_count",
        "started_at",
        "heartbeat_at",
        "heartbeat_age_seconds",
        "expires_at",
        "draining_at",
    }
    assert {key: a[key] for key in ("id", "host", "pid", "queues", "slots", "in_flight")} == {
        "id": "w-a",
        "host": "box-1",
        "pid": 41,
        "queues": ["emails", "reports"],
        "slots": 8,
        "in_flight": [str(held)],
    }
    assert a["in_flight_count"] == 1
    assert a["draining_at"] is None
    assert 0 <= a["heartbeat_age_seconds"] < 60
    assert _instant(a["expires_at"]) > _instant(a["heartbeat_at"]) >= _instant(a["started_at"])
    assert (b["id"], b["in_flight_count"]) == ("w-b", 0)
    assert _instant(b["draining_at"]) >= _instant(b["started_at"])

    header, row_a, row_b = durajobs("workers").out.splitlines()
    assert header.split()[:5] == ["ID", "HOST", "PID", "QUEUES", "SLOTS"]
    assert row_a.split()[:6] == ["w-a", "box-1", "41", "emails,reports", "8", "1"]
    assert row_a.split()[-1] == "-"
    assert row_b.split()[:6] == ["w-b", "box-2", "42", "emails", "2", "0"]
    assert row_b.split()[-1] != "-"


# -- counters -------------------------------------------------------------------------------


def _settle_some(client):
    """send: one done, one retried; export: one dead."""
    done = claimed_job(client, "s1", "emails", name="send")
    client.ack(done.fence)
    failed_job(client, "s2", "emails", name="send")
    dead_job(client, "x1", name="export")


def test_counters_total_each_name(client, durajobs):
    _settle_some(client)

    answer = durajobs("counters", "--json").json()
    assert set(answer) == {"since", "totals"}
    since = _instant(answer["since"])
    assert timedelta(minutes=59) < datetime.now(UTC) - since < timedelta(minutes=61)
    assert [set(total) for total in answer["totals"]] == [TALLY_KEYS | {"name"}] * 2
    export, send = answer["totals"]
    assert {key: export[key] for key in ("name", "done", "retried", "failed", "dead")} == {
        "name": "export",
        "done": 0,
        "retried": 0,
        "failed": 0,
        "dead": 1,
    }
    assert (send["name"], send["done"], send["retried"], send["dead"]) == ("send", 1, 1, 0)
    assert isinstance(send["duration_ms"], int)
    assert send["avg_duration_ms"] == round(send["duration_ms"] / 2, 1)

    only = durajobs("counters", "--name", "send", "--minutes", "5", "--json").json()
    assert [total["name"] for total in only["totals"]] == ["send"]
    title, header, row = durajobs("counters", "--name", "send").out.splitlines()
    assert title.startswith("since ")
    assert header.split() == ["NAME", "DONE", "RETRIED", "FAILED", "DEAD", "AVG"]
    assert row.split()[:5] == ["send", "1", "1", "0", "0"]

    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert durajobs("counters", "--since", future, "--json").json()["totals"] == []
    assert durajobs("counters", "--since", future).out.endswith(": no attempt settled\n")


def test_counters_buckets_show_the_history(client, durajobs):
    _settle_some(client)

    answer = durajobs("counters", "--buckets", "--name", "send", "--json").json()
    assert set(answer) == {"since", "buckets"}
    [bucket] = answer["buckets"]
    assert set(bucket) == TALLY_KEYS | {"name", "tier", "bucket"}
    assert (bucket["name"], bucket["tier"], bucket["done"], bucket["retried"]) == (
        "send",
        "1m",
        1,
        1,
    )
    assert _instant(bucket["bucket"]).second == 0
    header, *rows = durajobs("counters", "--buckets").out.splitlines()[1:]
    assert header.split()[:3] == ["BUCKET", "TIER", "NAME"]
    assert sorted(row.split()[3] for row in rows) == ["export", "send"]


def test_counters_refuse_a_bad_window(durajobs, capsys):
    _refused(durajobs("counters", "--minutes", "0"), "X_ARGUMENT_INVALID")
    _refused(durajobs("counters", "--since", "yesterday"), "X_ARGUMENT_INVALID")
    with pytest.raises(SystemExit) as stopped:
        main(["counters", "--since", "2026-01-01T00:00:00+00:00", "--minutes", "5"])
    assert stopped.value.code == 2
