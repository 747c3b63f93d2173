"""The dashboard over HTTP (issue 19): every page and action against a real Postgres, through
the ASGI app (Starlette's test client, httpx underneath), and its guards: CSRF, read-only, the
auth token, the security headers, HTML escaping and redaction."""

from __future__ import annotations

import html
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import durajobs.dashboard
from durajobs._db import calls
from durajobs._values.states import StepStatus
from durajobs.cli import main
from support.paths import TESTS
from support.states import claimed_job, dead_job, delayed_job, done_job, ready_job, stored_state

TOKEN = "a-dashboard-token-of-32-characters"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def dashboard(database_url) -> Iterator[TestClient]:
    with TestClient(durajobs.dashboard.app(database_url)) as client:
        yield client


def _csrf(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, "the page has a form with its CSRF token"
    return found.group(1)


def _post(client: TestClient, path: str, token: str, **fields: str) -> httpx.Response:
    return client.post(path, data={"csrf_token": token, **fields}, follow_redirects=False)


def _submit(client: TestClient, page: httpx.Response, index: int = 0) -> httpx.Response:
    """Post the page's `index`-th form as a browser would: its action and hidden fields."""
    forms = re.findall(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', page.text, re.S)
    action, body = forms[index]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body))
    fields = {key: html.unescape(value) for key, value in fields.items()}
    return client.post(html.unescape(action), data=fields, follow_redirects=False)


# -- pages ------------------------------------------------------------------------------------


def test_the_overview_shows_each_queue_and_the_hour_of_counters(dashboard, client):
    dead_job(client, "x1", queue="mail")
    ready_job(client, "r1", queue="mail")
    delayed_job(client, "d1", queue="mail")
    client.run(calls.rollup_counters())
    page = dashboard.get("/")
    assert page.status_code == 200
    row = re.search(r'<a href="/queues/mail">mail</a></td>\s*(.*?)</tr>', page.text, re.S)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.S)
    assert cells[:3] == ["1", "1", "0"]  # ready, delayed, running
    assert '<a href="/dead?queue=mail">1</a>' in row.group(1)
    assert '<svg class="chart"' in page.text
    assert "1 dead" in page.text
    assert '<rect class="dead"' in page.text  # its minute's bar


def test_every_page_carries_the_security_headers_and_loads_nothing_from_elsewhere(
    dashboard, client
):
    ready_job(client, "r1")
    for path in ("/", "/jobs", "/dead", "/tasks", "/workers", "/limits", "/queues/default"):
        page = dashboard.get(path)
        assert page.status_code == 200, path
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert not re.search(r'(src|href)="(https?:)?//', page.text), path
    css = dashboard.get("/static/dashboard.css")
    assert css.status_code == 200
    assert "svg.chart" in css.text
    assert dashboard.get("/static/dashboard.js").status_code == 200


def test_the_jobs_list_filters_and_pages_by_keyset(dashboard, client):
    ids = [ready_job(client, f"k{i}", queue="pages") for i in range(55)]
    other = ready_job(client, "elsewhere", queue="other", name="other-name", tenant_id="acme")
    first = dashboard.get("/jobs", params={"queue": "pages"})
    shown = re.findall(r'href="/jobs/([0-9a-f-]{36})"', first.text)
    assert len(shown) == 50
    assert str(other) not in first.text
    older = re.search(r'href="\?([^"]*after=[^"]+)"', first.text)
    assert older is not None
    second = dashboard.get("/jobs?" + older.group(1).replace("&amp;", "&"))
    rest = re.findall(r'href="/jobs/([0-9a-f-]{36})"', second.text)
    assert len(rest) == 5
    assert set(shown) | set(rest) == {str(i) for i in ids}
    assert re.findall(r'href="/jobs/([0-9a-f-]{36})"', dashboard.get(
        "/jobs", params={"tenant": "acme"}).text) == [str(other)]  # fmt: skip
    by_prefix = dashboard.get("/jobs", params={"id": str(other)[:13]})
    assert str(other) in by_prefix.text
    assert dashboard.get("/jobs", params={"state": "bogus"}).status_code == 400


def test_a_job_page_shows_its_error_steps_and_redacted_input(dashboard, client):
    claimed = claimed_job(client, "secretive", "q", max_attempts=1)
    client.run(calls.record_step(claimed.fence, "charge", StepStatus.COMPLETED, output={"n": 1}))
    client.nack(claimed.fence, error="card declined", error_code="X_CARD", error_stack="Trace\n")
    client.connection.execute(
        'update jobs.jobs_history set input = \'{"key": "secretive", "password": "hunter2"}\''
        " where id = %s",
        [claimed.id],
    )
    page = dashboard.get(f"/jobs/{claimed.id}")
    assert page.status_code == 200
    assert "card declined" in page.text
    assert "X_CARD" in page.text
    assert "charge" in page.text
    assert "[redacted]" in page.text
    assert "hunter2" not in page.text
    assert "Requeue from here" in page.text
    assert dashboard.get("/jobs/not-an-id").status_code == 404
    missing = dashboard.get("/jobs/00000000-0000-0000-0000-000000000001")
    assert missing.status_code == 404
    assert "X_JOB_NOT_FOUND" in missing.text


def test_html_in_input_error_and_step_names_is_shown_as_text(dashboard, client):
    """A job whose input, error and step name hold <script> renders them escaped."""
    attack = "<script>alert(1)</script>"
    claimed = claimed_job(client, "xss", "q", max_attempts=1)
    client.run(calls.record_step(claimed.fence, attack, StepStatus.COMPLETED, output={}))
    client.nack(claimed.fence, error=attack)
    client.connection.execute(
        "update jobs.jobs_history set input = jsonb_build_object('key', %s::text) where id = %s",
        [attack, claimed.id],
    )
    for path in (f"/jobs/{claimed.id}", "/jobs", "/dead"):
        page = dashboard.get(path)
        assert attack not in page.text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dashboard.get(f"/jobs/{claimed.id}").text


# -- actions ----------------------------------------------------------------------------------


def test_requeue_a_dead_job_and_see_it_ready(dashboard, client):
    id = dead_job(client, "to-requeue")
    page = dashboard.get(f"/jobs/{id}")
    answer = _post(dashboard, f"/jobs/{id}/requeue", _csrf(page))
    assert answer.status_code == 303
    assert answer.headers["location"].startswith(f"/jobs/{id}?done=")
    assert stored_state(client, id) == ("ready",)
    assert "requeue done" in dashboard.get(answer.headers["location"]).text


def test_cancel_promote_and_remove(dashboard, client):
    running = ready_job(client, "to-cancel")
    token = _csrf(dashboard.get(f"/jobs/{running}"))
    assert _post(dashboard, f"/jobs/{running}/cancel", token).status_code == 303
    assert stored_state(client, running) == ("cancelled",)
    later = delayed_job(client, "to-promote")
    assert _post(dashboard, f"/jobs/{later}/promote", token).status_code == 303
    assert client.connection.execute(
        "select run_at <= now() from jobs.jobs where id = %s", [later]
    ).fetchone() == (True,)
    gone = done_job(client, "to-remove")
    answer = _post(dashboard, f"/jobs/{gone}/remove", token)
    assert answer.headers["location"].startswith("/jobs?done=")
    assert stored_state(client, gone) is None
    # a refusal of the function is shown with its code
    refused = _post(dashboard, f"/jobs/{running}/cancel", token)
    assert refused.status_code == 400
    assert "X_JOB_NOT_CANCELLABLE" in refused.text


def test_pause_and_resume_a_queue_and_a_task(dashboard, client):
    ready_job(client, "q1", queue="mail")
    paused = _submit(dashboard, dashboard.get("/queues/mail"))
    assert paused.status_code == 303
    assert client.run(calls.queue_stats(["mail"]))[0].paused
    assert client.claim(["mail"], "w-test", batch_size=1) == []  # the claim stopped
    assert _submit(dashboard, dashboard.get("/queues/mail")).status_code == 303
    assert not client.run(calls.queue_stats(["mail"]))[0].paused
    client.connection.execute("select jobs.scheduler_arm(task => 'nightly', watermark => now())")
    assert _submit(dashboard, dashboard.get("/tasks")).status_code == 303
    assert "paused" in dashboard.get("/tasks").text
    assert _submit(dashboard, dashboard.get("/tasks")).status_code == 303
    (task,) = client.run(calls.task_fires())
    assert not task.paused


def test_a_name_with_url_characters_links_and_acts_on_itself(dashboard, client):
    """A queue may be named with `/`, `?`, `#`, `&` or `+`: its links and its pause still
    reach that queue, not a shorter or another one."""
    tricky = "victim/resume?x=1#frag & co+"
    ready_job(client, "t1", queue=tricky)
    ready_job(client, "t2", queue="victim")
    overview = dashboard.get("/")
    link = re.search(r'<a href="(/queues/[^"]+)">' + re.escape(html.escape(tricky)), overview.text)
    assert link is not None
    page = dashboard.get(html.unescape(link.group(1)))
    assert page.status_code == 200
    assert f"Queue {html.escape(tricky)}" in page.text
    answer = _submit(dashboard, page)
    assert answer.status_code == 303
    assert dashboard.get(answer.headers["location"]).status_code == 200
    stats = {row.queue: row.paused for row in client.run(calls.queue_stats())}
    assert stats == {tricky: True, "victim": False}
    dead = dashboard.get("/dead", params={"queue": tricky})
    assert dead.status_code == 200


def test_a_bulk_requeue_says_how_many_first_then_moves_them(dashboard, client):
    dead = [dead_job(client, f"b{i}", queue="bulk") for i in range(3)]
    dead_job(client, "elsewhere", queue="other")
    confirm = dashboard.get("/bulk/requeue", params={"state": "dead", "queue": "bulk"})
    assert confirm.status_code == 200
    assert re.search(r"3 dead jobs\s+in queue <strong>bulk</strong>", confirm.text)
    answer = _submit(dashboard, confirm)
    assert answer.status_code == 303
    assert "requeued+3+dead+jobs" in answer.headers["location"]
    assert [stored_state(client, id) for id in dead] == [("ready",)] * 3
    assert dashboard.get("/bulk/requeue", params={"state": "ready"}).status_code == 400


def test_a_bulk_action_touches_only_what_its_confirmation_counted(dashboard, client):
    """Rows arriving between the confirmation and the click are not touched: the action takes
    the rows of the filter created by the confirmation's instant, at most its count."""
    counted = [dead_job(client, f"c{i}", queue="bulk") for i in range(2)]
    confirm = dashboard.get("/bulk/remove", params={"state": "dead", "queue": "bulk"})
    assert re.search(r"2 dead jobs", confirm.text)
    time.sleep(0.01)
    late = dead_job(client, "late", queue="bulk")
    answer = _submit(dashboard, confirm)
    assert "removed+2+dead+jobs" in answer.headers["location"]
    assert [stored_state(client, id) for id in counted] == [None, None]
    assert stored_state(client, late) == ("dead",)


# -- guards -----------------------------------------------------------------------------------


def test_an_action_without_the_forms_token_is_refused(dashboard, client):
    id = dead_job(client, "guarded")
    token = _csrf(dashboard.get(f"/jobs/{id}"))
    assert _post(dashboard, f"/jobs/{id}/requeue", "").status_code == 403
    assert _post(dashboard, f"/jobs/{id}/requeue", token + "x").status_code == 403
    forged = dashboard.post(
        f"/jobs/{id}/requeue",
        data={"csrf_token": token},
        headers={"origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert forged.status_code == 403
    fresh = TestClient(dashboard.app)  # another browser: no cookie of its own
    assert fresh.post(f"/jobs/{id}/requeue", data={"csrf_token": token}).status_code == 403
    sandboxed = dashboard.post(
        f"/jobs/{id}/requeue",
        data={"csrf_token": token},
        headers={"origin": "null"},
        follow_redirects=False,
    )
    assert sandboxed.status_code == 403
    # a cookie planted by a sibling origin, submitted as its own token: not the HMAC
    planted = TestClient(dashboard.app, cookies={"durajobs_csrf": "planted"})
    assert planted.post(f"/jobs/{id}/requeue", data={"csrf_token": "planted"}).status_code == 403
    assert stored_state(client, id) == ("dead",)


def test_only_the_loopback_names_are_answered_when_so_served(database_url, client):
    """What `durajobs dashboard` does without a token: a Host other than the loopback's (a
    page whose name was re-bound to 127.0.0.1) is refused, pages and actions alike."""
    id = dead_job(client, "rebound")
    hosts = ("127.0.0.1", "localhost", "::1")
    with TestClient(durajobs.dashboard.app(database_url, allowed_hosts=hosts)) as browser:
        evil = {"host": "evil.example:8080"}
        assert browser.get("/", headers=evil).status_code == 401
        page = browser.get(f"/jobs/{id}", headers={"host": "localhost:8080"})
        assert page.status_code == 200
        forged = browser.post(
            f"/jobs/{id}/requeue",
            data={"csrf_token": _csrf(page)},
            headers={**evil, "origin": "http://evil.example:8080"},
            follow_redirects=False,
        )
        assert forged.status_code == 401
        local = browser.post(
            f"/jobs/{id}/requeue",
            data={"csrf_token": _csrf(page)},
            headers={"host": "127.0.0.1:8080", "origin": "http://localhost:8080"},
            follow_redirects=False,
        )
        assert local.status_code == 303
    assert stored_state(client, id) == ("ready",)


def test_the_headers_are_on_every_answer_and_read_only_offers_no_bulk(database_url, dashboard):
    for path in ("/no-such-page", "/static/dashboard.css", "/static/favicon.svg"):
        answer = dashboard.get(path)
        assert "default-src 'none'" in answer.headers["content-security-policy"], path
    with TestClient(durajobs.dashboard.app(database_url, read_only=True)) as viewer:
        assert viewer.get("/bulk/remove", params={"state": "dead"}).status_code == 400


def test_a_read_only_dashboard_offers_and_takes_no_action(database_url, client):
    id = dead_job(client, "read-only")
    with TestClient(durajobs.dashboard.app(database_url, read_only=True)) as viewer:
        page = viewer.get(f"/jobs/{id}")
        assert page.status_code == 200
        assert "Requeue" not in page.text
        assert "read-only" in page.text
        token = viewer.cookies.get("durajobs_csrf") or "none"
        assert _post(viewer, f"/jobs/{id}/requeue", token).status_code == 403
    assert stored_state(client, id) == ("dead",)


def test_the_auth_token_guards_every_page_and_action(database_url, client):
    id = dead_job(client, "behind-a-token")
    with TestClient(durajobs.dashboard.app(database_url, auth_token=TOKEN)) as browser:
        assert browser.get("/", follow_redirects=False).headers["location"] == "/login"
        assert browser.post(f"/jobs/{id}/requeue", data={}).status_code == 401
        bearer = browser.get("/", headers={"authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        refused = browser.post("/login", data={"token": "wrong"}, follow_redirects=False)
        assert "not the dashboard" in refused.text
        signed = browser.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert signed.status_code == 303
        assert TOKEN not in signed.headers["set-cookie"]  # the cookie is not the token
        page = browser.get(f"/jobs/{id}")
        assert page.status_code == 200
        assert _post(browser, f"/jobs/{id}/requeue", _csrf(page)).status_code == 303
    assert stored_state(client, id) == ("ready",)
    with pytest.raises(durajobs.ConfigInvalid):
        durajobs.dashboard.app(database_url, auth_token="short")


def test_an_auth_function_guards_a_mounted_dashboard(database_url, client):
    """Mounted in an application under /ops: links carry the prefix, and the application's
    own auth function decides who sees it."""
    id = ready_job(client, "mounted")
    inner = durajobs.dashboard.app(
        database_url, auth=lambda request: request.headers.get("x-user") == "alice"
    )
    host = Starlette(routes=[Mount("/ops", app=inner)])
    with TestClient(host) as browser:
        assert browser.get("/ops/").status_code == 401
        page = browser.get("/ops/jobs", headers={"x-user": "alice"})
        assert page.status_code == 200
        assert f'href="/ops/jobs/{id}"' in page.text
        assert 'href="/ops/static/dashboard.css"' in page.text


# -- the command ------------------------------------------------------------------------------


def test_the_command_refuses_another_host_without_a_token(database_url, capsys, monkeypatch):
    monkeypatch.delenv("DURAJOBS_DASHBOARD_TOKEN", raising=False)
    status = main(["dashboard", "--host", "0.0.0.0", "--database-url", database_url])
    assert status == 1
    err = capsys.readouterr().err
    assert "X_CONFIG_INVALID" in err
    assert "--auth-token" in err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_command_serves_the_dashboard_on_the_loopback(database_url, client):
    id = ready_job(client, "served")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "durajobs.cli", "dashboard", "--port", str(port),
         "--database-url", database_url],
        cwd=TESTS,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        answer: Any = None
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/jobs", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer is not None, "the dashboard never answered"
        assert answer.status_code == 200
        assert str(id) in answer.text
    finally:
        server.terminate()
        server.communicate(timeout=10)


def test_the_tasks_page_shows_each_declared_schedule_and_next_fire(database_url, client):
    registry = durajobs.Registry()

    @registry.task(name="nightly", cron="0 3 * * *", tz="Europe/Paris")
    def nightly(occurrence: Any) -> list[Any]:
        return []

    client.connection.execute("select jobs.scheduler_arm(task => 'nightly', watermark => now())")
    client.connection.execute("select jobs.scheduler_arm(task => 'retired', watermark => now())")
    ((watermark,),) = client.connection.execute(
        "select watermark from jobs.scheduler_tasks where task = 'nightly'"
    ).fetchall()
    expected = nightly.next_run(watermark).isoformat(sep=" ", timespec="seconds")
    with TestClient(durajobs.dashboard.app(database_url, registry=registry)) as browser:
        page = browser.get("/tasks").text
    row = re.search(r"<td>nightly</td>(.*?)</tr>", page, re.S)
    assert row is not None
    assert "<code>0 3 * * *</code> Europe/Paris" in row.group(1)
    assert expected in row.group(1)
    retired = re.search(r"<td>retired</td>(.*?)</tr>", page, re.S)
    assert retired is not None
    assert "not declared" in retired.group(1)


def test_bulk_promote_and_remove_say_how_many_then_act(dashboard, client):
    later = [delayed_job(client, f"p{i}", queue="later") for i in range(2)]
    confirm = dashboard.get("/bulk/promote", params={"state": "delayed", "queue": "later"})
    assert re.search(r"2 delayed jobs\s+in queue <strong>later</strong>", confirm.text)
    answer = _submit(dashboard, confirm)
    assert "promoted+2+delayed+jobs" in answer.headers["location"]
    assert client.connection.execute(
        "select bool_and(run_at <= now()) from jobs.jobs where id = any(%s)", [later]
    ).fetchone() == (True,)
    gone = [done_job(client, f"g{i}", queue="old") for i in range(2)]
    confirm = dashboard.get("/bulk/remove", params={"state": "done", "queue": "old"})
    assert re.search(r"2 done jobs\s+in queue <strong>old</strong>", confirm.text)
    _submit(dashboard, confirm)
    assert [stored_state(client, id) for id in gone] == [None, None]
    assert dashboard.get("/bulk/promote", params={"state": "suspended"}).status_code == 400


def test_search_by_key_and_a_jobs_run(dashboard, client):
    """The jobs list finds a job by its idempotency key (exactly), and a job's page lists the
    other jobs of its run (a requeue from its steps, a continuation)."""
    wanted = ready_job(client, "invoice:7")
    ready_job(client, "invoice:70")
    page = dashboard.get("/jobs", params={"key": "invoice:7"})
    assert re.findall(r'href="/jobs/([0-9a-f-]{36})"', page.text) == [str(wanted)]
    assert "/bulk/" not in page.text  # a bulk action takes no key: none is offered
    assert dashboard.get("/bulk/requeue", params={"state": "dead", "key": "x"}).status_code == 400
    sibling = client.enqueue("op", {"key": "next"}, "next", run_id=wanted, queue="later").id
    job_page = dashboard.get(f"/jobs/{wanted}")
    assert "The rest of this run" in job_page.text
    assert f'href="/jobs/{sibling}"' in job_page.text
    assert f'href="/jobs/{wanted}"' in dashboard.get(f"/jobs/{sibling}").text
    alone = ready_job(client, "alone")
    assert "The rest of this run" not in dashboard.get(f"/jobs/{alone}").text


def _failed_delivery(client, tenant_id: str | None) -> None:
    client.run(
        calls.webhook_record(
            "hooks.deliver",
            endpoint_id="ep_<b>1</b>",
            event_id="evt_1",
            topic="invoice.paid",
            job_id=uuid.uuid4(),
            attempt=1,
            outcome="failed",
            status_code=500,
            error="down",
            duration_ms=12,
            disable_after=1,
            tenant_id=tenant_id,
        )
    )


def test_the_webhooks_page_enables_one_disabled_endpoint(dashboard, client):
    """The endpoints (the disabled first) and their attempts; Enable takes the endpoint of the
    row's webhook and tenant only, and names are escaped."""
    _failed_delivery(client, "acme")
    _failed_delivery(client, None)
    page = dashboard.get("/webhooks")
    assert page.status_code == 200
    assert "ep_<b>1</b>" not in page.text
    assert page.text.count("ep_&lt;b&gt;1&lt;/b&gt;") >= 4  # two endpoints, two attempts
    forms = re.findall(r'action="/actions/webhook-endpoint/enable"', page.text)
    assert len(forms) == 2
    acme = next(
        index
        for index, form in enumerate(
            re.findall(r'<form method="post" action="[^"]+"[^>]*>(.*?)</form>', page.text, re.S)
        )
        if 'value="acme"' in form
    )
    answer = _submit(dashboard, page, acme)
    assert answer.status_code == 303
    rows = client.run(calls.webhook_endpoints())
    assert {(row.tenant_id, row.disabled_at is None) for row in rows} == {
        ("acme", True),
        (None, False),
    }


def test_a_job_page_shows_its_result_redacted_its_parent_and_its_children(dashboard, client):
    parent = claimed_job(client, "parent", "q")
    child = client.enqueue("child", {}, "child:1", queue="q", parent_id=parent.id)
    (claimed_child,) = client.claim(["q"], "w2")
    assert claimed_child.id == child.id
    client.run(
        calls.ack_results_landed(
            "w2", [child.id], [claimed_child.claim], [{"total": 7, "password": "hunter2"}]
        )
    )

    page = dashboard.get(f"/jobs/{parent.id}")
    assert "Children" in page.text
    assert "1 (1 done)" in page.text
    assert f"/jobs/{child.id}" in page.text
    child_page = dashboard.get(f"/jobs/{child.id}")
    assert "Result" in child_page.text
    assert "&#34;total&#34;: 7" in child_page.text or '"total": 7' in child_page.text
    # a result is redacted as an input is: an operator never sees the secret's value
    assert "hunter2" not in child_page.text
    assert f"/jobs/{parent.id}" in child_page.text
