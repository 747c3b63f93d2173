"""Webhook deliveries (R83-R86): `Registry.webhook(...)` run by a real worker against a real
Postgres and a real HTTP receiver on 127.0.0.1 (support.webhook_receiver), whose answers each
test scripts. Nothing here mocks the database or httpx."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import durajobs
from durajobs.declare.retry import RetryPolicy
from durajobs.declare.webhook import encode, judge, retry_after_seconds
from durajobs.runtime.worker import Worker
from durajobs.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, TOPIC_HEADER, verify
from support.rows import fetch_all
from support.running import run_until
from support.waiting import wait_until
from support.webhook_receiver import Answer, Received, Receiver

NAME = "hooks.deliver"
ENDPOINT = "ep_1"
SECRET = "whsec_delivery_test_secret"
ENDED = ("done", "dead", "failed")
FAST = RetryPolicy.of(attempts=3, delay=timedelta(milliseconds=10), jitter=False)
SIGNED = re.compile(r"^t=([0-9]+),v1=[0-9a-f]{64}$")


# -- the pieces every test uses -------------------------------------------------------------


class Lookup:
    """The application's endpoint function: answers `answer(endpoint_id, call number)` and
    remembers every id it was asked for."""

    def __init__(self, answer: Callable[[str, int], Any]) -> None:
        self.answer = answer
        self.calls: list[str] = []

    def __call__(self, endpoint_id: str) -> Any:
        self.calls.append(endpoint_id)
        return self.answer(endpoint_id, len(self.calls))


def _endpoint_at(receiver: Receiver, **options: Any) -> Lookup:
    return Lookup(lambda _id, _n: durajobs.WebhookEndpoint(receiver.url(), SECRET, **options))


def _statuses(*statuses: int) -> Callable[[Received, int], Answer]:
    """Answer the n-th request with the n-th status (the last one from then on)."""
    return lambda _request, index: Answer(statuses[min(index, len(statuses) - 1)], body=b"said")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


@pytest.fixture
def registries() -> Iterator[list[durajobs.Registry]]:
    made: list[durajobs.Registry] = []
    yield made
    for registry in made:
        registry.close()


@pytest.fixture
def declare(
    database_url: str, registries: list[durajobs.Registry]
) -> Callable[..., durajobs.Job[durajobs.WebhookEvent]]:
    """Declare the webhook on a registry of its own: retried fast unless told otherwise."""

    def make(endpoint: Any, **options: Any) -> durajobs.Job[durajobs.WebhookEvent]:
        registry = durajobs.Registry(database_url=database_url)
        registries.append(registry)
        declaration: dict[str, Any] = {
            "name": NAME,
            "endpoint": endpoint,
            "tenant": "none",
            "retry": FAST,
        }
        declaration.update(options)
        return registry.webhook(**declaration)

    return make


def _event(event_id: str = "evt_1", **fields: Any) -> durajobs.WebhookEvent:
    values: dict[str, Any] = {
        "endpoint_id": ENDPOINT,
        "event_id": event_id,
        "topic": "invoice.paid",
        "payload": {"invoice": "in_42", "amount": 4200, "note": "café"},
    }
    values.update(fields)
    return durajobs.WebhookEvent(**values)


def _worker(job: durajobs.Job[Any], database_url: str) -> Worker:
    return Worker(
        job.registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )


def _job_row(database_url: str, job_id: uuid.UUID) -> dict[str, Any]:
    ((state, attempt, code, error, due_in),) = fetch_all(
        database_url,
        "select state, attempt, last_error_code, last_error, "
        "extract(epoch from run_at - now())::float8 from jobs.jobs where id = %s",
        [job_id],
    )
    return {"state": state, "attempt": attempt, "code": code, "error": error, "due_in": due_in}


def _run_to_end(database_url: str, job: durajobs.Job[Any], *ids: uuid.UUID) -> None:
    def ended() -> bool:
        return all(_job_row(database_url, i)["state"] in ENDED for i in ids)

    asyncio.run(run_until(_worker(job, database_url), ended))


def _ledger(database_url: str) -> list[tuple[Any, ...]]:
    """(outcome, status_code, attempt, event_id) of every recorded attempt, in order."""
    return fetch_all(
        database_url,
        "select outcome, status_code, attempt, event_id from jobs.webhook_attempts order by id",
    )


def _endpoint_row(database_url: str, endpoint_id: str = ENDPOINT) -> tuple[Any, ...] | None:
    rows = fetch_all(
        database_url,
        "select consecutive_failures, disabled_at, last_delivered_at "
        "from jobs.webhook_endpoints where endpoint_id = %s",
        [endpoint_id],
    )
    return rows[0] if rows else None


def _signed_at(request: Received) -> int:
    stated = request.header(SIGNATURE_HEADER)
    assert stated is not None
    matched = SIGNED.match(stated)
    assert matched, stated
    return int(matched.group(1))


async def _drain_once(
    worker: Worker,
    ready: Callable[[], bool],
    after_drain: Callable[[], None] | None = None,
    timeout: float = 10.0,
) -> None:
    """Run `worker` until `ready()`, drain it, (then call `after_drain`), and wait for it."""
    runner = asyncio.ensure_future(worker.run())
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert time.monotonic() < deadline, "the worker did not get there in time"
            assert not runner.done(), runner.exception() if runner.done() else None
            await asyncio.sleep(0.01)
        worker.drain()
        if after_drain is not None:
            await asyncio.sleep(0.1)  # the drain has reached the attempt
            after_drain()
        await asyncio.wait_for(asyncio.shield(runner), timeout)
    finally:
        if not runner.done():
            worker.stop()
            await asyncio.wait_for(runner, 30)


# -- 1. the idempotency key ------------------------------------------------------------------


def test_the_key_is_name_endpoint_and_event_and_a_live_twin_is_deduped(database_url, declare):
    """R86: one live delivery of an event to an endpoint, keyed `<name>:<endpoint>:<event>`."""
    job = declare(Lookup(lambda _id, _n: None))
    first = job.enqueue(_event())
    again = job.enqueue(_event())
    elsewhere = job.enqueue(_event(endpoint_id="ep_2"))
    assert first.deduped is False
    assert again.deduped is True
    assert again.id == first.id
    assert elsewhere.deduped is False
    assert elsewhere.id != first.id
    rows = fetch_all(
        database_url,
        "select idempotency_key from jobs.jobs where name = %s order by idempotency_key",
        [NAME],
    )
    assert rows == [(f"{NAME}:ep_1:evt_1",), (f"{NAME}:ep_2:evt_1",)]


@pytest.mark.parametrize("field", ["event_id", "topic", "endpoint_id"])
def test_a_colon_in_a_key_part_is_refused_at_enqueue(database_url, declare, field):
    """R86 (second half): `a:b` + `c` and `a` + `b:c` would share a key and a signed text."""
    job = declare(Lookup(lambda _id, _n: None))
    with pytest.raises(durajobs.WebhookEventInvalid) as refused:
        job.enqueue(_event(**{field: "evt:1" if field == "event_id" else f"x:{field}"}))
    assert refused.value.code == "X_WEBHOOK_EVENT_INVALID"
    assert refused.value.detail == {"field": field}
    assert fetch_all(database_url, "select count(*) from jobs.jobs") == [(0,)]


# -- 2. a delivery ---------------------------------------------------------------------------


def test_a_delivery_is_one_signed_post_of_the_encoded_event(database_url, declare, receiver):
    """Items 198-199: the receiver gets the document encode() makes, signed so that verify()
    accepts it; the job ends done and the ledger holds one 'delivered' attempt."""
    lookup = _endpoint_at(receiver)
    job = declare(lookup, tenant=lambda event: event.tenant_id)
    event = _event(tenant_id="acme")
    enqueued = job.enqueue(event)
    _run_to_end(database_url, job, enqueued.id)

    assert receiver.count() == 1
    (request,) = receiver.requests
    assert (request.method, request.path) == ("POST", "/hook")
    assert request.body == encode(event)
    assert json.loads(request.body) == {
        "id": "evt_1",
        "topic": "invoice.paid",
        "data": {"invoice": "in_42", "amount": 4200, "note": "café"},
    }
    assert request.header(EVENT_ID_HEADER) == "evt_1"
    assert request.header(TOPIC_HEADER) == "invoice.paid"
    assert abs(_signed_at(request) - request.at) <= 2
    assert request.header("content-type") == "application/json"
    assert verify(SECRET, request.as_dict(), request.body) is True
    assert verify("whsec_someone_else", request.as_dict(), request.body) is False
    assert lookup.calls == [ENDPOINT]

    assert _job_row(database_url, enqueued.id)["state"] == "done"
    rows = fetch_all(
        database_url,
        "select outcome, status_code, attempt, job_id, webhook, endpoint_id, event_id, topic, "
        "tenant_key, error from jobs.webhook_attempts",
    )
    assert rows == [
        ("delivered", 200, 1, enqueued.id, NAME, ENDPOINT, "evt_1", "invoice.paid", "acme", None)
    ]
    failures, disabled_at, delivered_at = _endpoint_row(database_url) or (None, None, None)
    assert (failures, disabled_at) == (0, None)
    assert delivered_at is not None


# -- 3. a retry is signed anew ---------------------------------------------------------------


def test_a_retry_is_signed_again_at_its_own_sending_time(database_url, declare, receiver):
    """Item 199: the second attempt carries a fresh t= (attempts 1.1 s apart), and both verify."""
    receiver.script = _statuses(500, 200)
    slow = RetryPolicy.of(attempts=3, delay=timedelta(seconds=1.1), jitter=False)
    job = declare(_endpoint_at(receiver), retry=slow)
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    first, second = receiver.requests
    assert verify(SECRET, first.as_dict(), first.body, now=first.at)
    assert verify(SECRET, second.as_dict(), second.body, now=second.at)
    assert first.body == second.body  # the same bytes on every attempt
    assert _signed_at(second) - _signed_at(first) >= 1
    assert first.header(SIGNATURE_HEADER) != second.header(SIGNATURE_HEADER)
    assert _ledger(database_url) == [("failed", 500, 1, "evt_1"), ("delivered", 200, 2, "evt_1")]
    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["attempt"]) == ("done", 2)


# -- 4. the endpoint's headers go under ours -------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    ["durajobs-webhook-signature", "Durajobs-Webhook-Signature", "DURAJOBS-WEBHOOK-SIGNATURE"],
)
def test_an_endpoint_header_cannot_replace_the_signature(database_url, declare, receiver, spelling):
    forged = "t=1,v1=" + "0" * 64
    headers = {spelling: forged, "DuraJobs-Webhook-Topic": "forged.topic", "X-Partner": "p-7"}
    job = declare(_endpoint_at(receiver, headers=headers))
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    (request,) = receiver.requests
    signatures = request.all(SIGNATURE_HEADER)
    assert len(signatures) == 1
    assert signatures[0] != forged
    assert request.all(TOPIC_HEADER) == ["invoice.paid"]
    assert request.header("x-partner") == "p-7"
    assert verify(SECRET, request.as_dict(), request.body) is True
    assert _ledger(database_url) == [("delivered", 200, 1, "evt_1")]


# -- 5. a redirect or a 4xx ends the job -----------------------------------------------------


@pytest.mark.parametrize("status", [302, 400])
def test_a_redirect_is_not_followed_and_a_redirect_or_400_ends_dead(
    database_url, declare, receiver, status
):
    def script(request: Received, _index: int) -> Answer:
        if request.path == "/target":
            return Answer(200)
        return Answer(status, headers={"Location": receiver.url("/target")})

    receiver.script = script
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    assert receiver.count("/hook") == 1
    assert receiver.count("/target") == 0
    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["attempt"], row["code"]) == (
        "dead",
        1,
        "X_WEBHOOK_DELIVERY_REJECTED",
    )
    assert _ledger(database_url) == [("rejected", status, 1, "evt_1")]
    assert _endpoint_row(database_url)[0] == 1  # counted as a failure of the endpoint


def test_a_rejection_whose_body_holds_a_nul_is_recorded_and_ends_dead(
    database_url, declare, receiver
):
    receiver.script = lambda _request, _index: Answer(400, body=b"bad field\x00name")
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["attempt"], row["code"]) == (
        "dead",
        1,
        "X_WEBHOOK_DELIVERY_REJECTED",
    )
    assert "bad field\\x00name" in row["error"]
    assert _ledger(database_url) == [("rejected", 400, 1, "evt_1")]


# -- 6. the status table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "outcome", "code"),
    [
        (200, {}, "delivered", None),
        (204, {}, "delivered", None),
        (400, {}, "rejected", "X_WEBHOOK_DELIVERY_REJECTED"),
        (404, {}, "rejected", "X_WEBHOOK_DELIVERY_REJECTED"),
        (410, {}, "rejected", "X_WEBHOOK_DELIVERY_REJECTED"),
        (302, {"Location": "/elsewhere"}, "rejected", "X_WEBHOOK_DELIVERY_REJECTED"),
        (408, {}, "failed", "X_WEBHOOK_DELIVERY_FAILED"),
        (500, {}, "failed", "X_WEBHOOK_DELIVERY_FAILED"),
        (502, {}, "failed", "X_WEBHOOK_DELIVERY_FAILED"),
        (429, {}, "throttled", "X_WEBHOOK_DELIVERY_THROTTLED"),
        (503, {"Retry-After": "30"}, "throttled", "X_WEBHOOK_DELIVERY_THROTTLED"),
        (503, {}, "failed", "X_WEBHOOK_DELIVERY_FAILED"),
        (503, {"Retry-After": "0"}, "failed", "X_WEBHOOK_DELIVERY_FAILED"),
    ],
)
def test_each_status_maps_to_its_outcome(status, headers, outcome, code):
    verdict = judge(httpx.Response(status, headers=headers), "endpoint 'ep_1'")
    assert verdict.outcome == outcome
    if code is None:
        assert verdict.error is None
    else:
        assert verdict.error is not None
        assert verdict.error.code == code
        assert verdict.error.detail["status"] == status


# -- 7. Retry-After --------------------------------------------------------------------------


def test_a_429_with_retry_after_is_retried_when_the_endpoint_said(database_url, declare, receiver):
    receiver.script = lambda _r, _i: Answer(429, headers={"Retry-After": "120"})
    patient = RetryPolicy.of(attempts=3, delay=timedelta(milliseconds=10), max_delay="1h")
    job = declare(_endpoint_at(receiver), retry=patient)
    enqueued = job.enqueue(_event())

    def retried() -> bool:
        row = _job_row(database_url, enqueued.id)
        return row["code"] is not None and row["state"] != "running"

    asyncio.run(run_until(_worker(job, database_url), retried))
    row = _job_row(database_url, enqueued.id)
    assert row["state"] in ("ready", "delayed")
    assert row["code"] == "X_WEBHOOK_DELIVERY_THROTTLED"
    assert row["attempt"] == 1
    assert 119 <= row["due_in"] <= 120 * 1.25 + 5, row["due_in"]
    assert receiver.count() == 1
    assert _ledger(database_url) == [("throttled", 429, 1, "evt_1")]
    assert _endpoint_row(database_url)[0] == 0  # the endpoint asked for time: no failure


BASE = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)  # long past: our clock would say "expired"


def test_retry_after_as_a_date_is_read_against_the_responses_own_date():
    response = httpx.Response(
        503,
        headers={
            "Date": format_datetime(BASE, usegmt=True),
            "Retry-After": format_datetime(BASE + timedelta(seconds=90), usegmt=True),
        },
    )
    assert retry_after_seconds(response) == 90.0
    verdict = judge(response, "endpoint 'ep_1'")
    assert verdict.outcome == "throttled"
    assert isinstance(verdict.error, durajobs.WebhookDeliveryThrottled)
    assert verdict.error.retry_after == 90.0


def test_retry_after_as_a_date_without_a_date_header_reads_our_clock():
    stated = format_datetime(BASE + timedelta(seconds=90), usegmt=True)
    response = httpx.Response(429, headers={"Retry-After": stated})
    assert retry_after_seconds(response, now=BASE) == 90.0


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "0"},
        {"Retry-After": format_datetime(BASE, usegmt=True)},  # past on our clock
        {
            "Date": format_datetime(BASE, usegmt=True),
            "Retry-After": format_datetime(BASE - timedelta(seconds=10), usegmt=True),
        },
        {"Retry-After": "soon"},
        {},
    ],
    ids=["zero", "past-date", "before-its-date", "nonsense", "absent"],
)
def test_a_zero_past_or_unreadable_retry_after_is_unstated(headers):
    assert retry_after_seconds(httpx.Response(429, headers=headers)) is None


# -- 8. disabling an endpoint ----------------------------------------------------------------


def test_failures_in_a_row_disable_the_endpoint_and_no_request_follows(
    database_url, declare, receiver
):
    """R83: after disable_after failures the next attempt asks the ledger and sends nothing;
    an operator's enable lets deliveries through again."""
    receiver.script = _statuses(500)
    persistent = RetryPolicy.of(attempts=5, delay=timedelta(milliseconds=10), jitter=False)
    job = declare(_endpoint_at(receiver), disable_after=3, retry=persistent)
    first = job.enqueue(_event("evt_1"))
    _run_to_end(database_url, job, first.id)

    assert receiver.count() == 3  # the fourth attempt made no request
    row = _job_row(database_url, first.id)
    assert (row["state"], row["attempt"], row["code"]) == (
        "dead",
        4,
        "X_WEBHOOK_ENDPOINT_DISABLED",
    )
    assert _ledger(database_url) == [("failed", 500, n, "evt_1") for n in (1, 2, 3)]
    failures, disabled_at, _delivered = _endpoint_row(database_url) or (None, None, None)
    assert failures == 3
    assert disabled_at is not None

    assert fetch_all(database_url, "select jobs.enable_webhook_endpoint_v1(%s)", [ENDPOINT]) == [
        (1,)
    ]
    receiver.script = _statuses(200)
    second = job.enqueue(_event("evt_2"))
    _run_to_end(database_url, job, second.id)
    assert _job_row(database_url, second.id)["state"] == "done"
    assert receiver.count() == 4
    assert _ledger(database_url)[-1] == ("delivered", 200, 1, "evt_2")
    assert _endpoint_row(database_url)[:2] == (0, None)


def test_a_delivery_between_failures_starts_the_count_again(database_url, declare, receiver):
    """fail, fail, deliver another event, fail, fail: never three in a row, never disabled."""

    def script(request: Received, _index: int) -> Answer:
        return Answer(200 if request.header(EVENT_ID_HEADER) == "evt_ok" else 500)

    receiver.script = script
    twice = RetryPolicy.of(attempts=2, delay=timedelta(milliseconds=10), jitter=False)
    job = declare(_endpoint_at(receiver), disable_after=3, retry=twice)
    ids = []
    for event_id in ("evt_a", "evt_ok", "evt_b"):
        enqueued = job.enqueue(_event(event_id))
        _run_to_end(database_url, job, enqueued.id)
        ids.append(enqueued.id)

    states = [_job_row(database_url, i) for i in ids]
    assert [(s["state"], s["attempt"], s["code"]) for s in states] == [
        ("dead", 2, "X_WEBHOOK_DELIVERY_FAILED"),
        ("done", 1, None),
        ("dead", 2, "X_WEBHOOK_DELIVERY_FAILED"),  # not X_WEBHOOK_ENDPOINT_DISABLED
    ]
    assert [r.header(EVENT_ID_HEADER) for r in receiver.requests] == [
        "evt_a",
        "evt_a",
        "evt_ok",
        "evt_b",
        "evt_b",
    ]
    assert [outcome for outcome, *_ in _ledger(database_url)] == [
        "failed",
        "failed",
        "delivered",
        "failed",
        "failed",
    ]
    assert _endpoint_row(database_url)[:2] == (2, None)


# -- 9. a deadline records nothing; a request timeout is a failure ----------------------------


def test_the_jobs_deadline_aborts_the_request_and_records_nothing(database_url, declare, receiver):
    """R84: an attempt the worker abandoned says nothing about the endpoint."""
    receiver.script = lambda _r, _i: Answer(200, hold=3.0)
    once = RetryPolicy.of(attempts=1)
    job = declare(_endpoint_at(receiver), timeout=timedelta(milliseconds=300), retry=once)
    enqueued = job.enqueue(_event())
    began = time.monotonic()
    _run_to_end(database_url, job, enqueued.id)
    assert time.monotonic() - began < 2.9  # not waited out

    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["code"]) == ("dead", "X_JOB_TIMEOUT")
    assert receiver.count() == 1
    wait_until(lambda: receiver.aborted, timeout=2, what="the client hanging up")
    assert receiver.answered == []
    assert _ledger(database_url) == []
    assert _endpoint_row(database_url) is None


def test_a_request_timeout_is_recorded_as_a_failed_attempt(database_url, declare, receiver):
    receiver.script = lambda _r, _i: Answer(200, hold=3.0)
    once = RetryPolicy.of(attempts=1)
    job = declare(_endpoint_at(receiver), request_timeout=timedelta(milliseconds=300), retry=once)
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["code"]) == ("dead", "X_WEBHOOK_DELIVERY_FAILED")
    (recorded,) = fetch_all(
        database_url, "select outcome, status_code, attempt, error from jobs.webhook_attempts"
    )
    assert recorded[:3] == ("failed", None, 1)
    assert "ReadTimeout" in recorded[3]
    assert _endpoint_row(database_url)[0] == 1
    wait_until(lambda: receiver.aborted, timeout=2, what="the client hanging up")


# -- 10. a drain -----------------------------------------------------------------------------


def test_a_drain_finishes_a_request_in_flight_and_the_next_run_sends_nothing(
    database_url, declare, receiver
):
    """R85: a request already sent is not cut by a drain (the next worker would send it
    again); it is finished and recorded, and the run's next attempt finds it delivered."""
    receiver.script = lambda _r, _i: Answer(200, hold=1.5)
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    worker = _worker(job, database_url)
    asyncio.run(_drain_once(worker, lambda: receiver.count() == 1))

    assert receiver.answered == receiver.requests  # the hold ran out and the answer went out
    assert receiver.aborted == []
    assert _ledger(database_url) == [("delivered", 200, 1, "evt_1")]
    assert worker.stats().interrupted == 1
    assert _job_row(database_url, enqueued.id)["state"] == "ready"  # handed back, not settled

    receiver.script = _statuses(200)
    _run_to_end(database_url, job, enqueued.id)
    assert _job_row(database_url, enqueued.id)["state"] == "done"
    assert receiver.count() == 1  # no second POST
    assert len(_ledger(database_url)) == 1


def test_a_drain_before_the_request_is_sent_sends_nothing(database_url, declare, receiver):
    entered, release = threading.Event(), threading.Event()

    def lookup(_endpoint_id: str, _n: int) -> durajobs.WebhookEndpoint:
        entered.set()
        assert release.wait(5), "the test never released the lookup"
        return durajobs.WebhookEndpoint(receiver.url(), SECRET)

    job = declare(Lookup(lookup))
    enqueued = job.enqueue(_event())
    worker = _worker(job, database_url)
    asyncio.run(_drain_once(worker, entered.is_set, after_drain=release.set))

    time.sleep(0.2)  # room for a request that should not come
    assert receiver.count() == 0
    assert _ledger(database_url) == []
    assert worker.stats().interrupted == 1
    assert _job_row(database_url, enqueued.id)["state"] == "ready"

    _run_to_end(database_url, job, enqueued.id)  # the next worker delivers it, once
    assert receiver.count() == 1
    assert _ledger(database_url) == [("delivered", 200, 1, "evt_1")]


def test_a_drain_landing_while_the_answer_is_recorded_still_records_it(
    database_url, declare, receiver
):
    """R85: the request has landed and its answer is being written to the ledger when the
    drain comes: the write is finished, so the next worker finds the delivery and sends
    nothing (a cut write would leave no trace, and the event would be sent twice)."""
    job = declare(_endpoint_at(receiver))
    fetch_all(
        database_url,
        "insert into jobs.webhook_endpoints (webhook, tenant_key, endpoint_id) values (%s, '', %s)",
        [NAME, ENDPOINT],
    )
    enqueued = job.enqueue(_event())
    with psycopg.connect(database_url) as holder:
        # the ledger's write of the attempt waits on the endpoint's row, held here
        holder.execute(
            "select 1 from jobs.webhook_endpoints where endpoint_id = %s for update", [ENDPOINT]
        )

        def recording() -> bool:
            return bool(
                receiver.answered
                and fetch_all(
                    database_url,
                    "select 1 from pg_stat_activity where datname = current_database() "
                    "and wait_event_type = 'Lock' and query like '%%webhook_record_v1%%'",
                )
            )

        worker = _worker(job, database_url)
        asyncio.run(_drain_once(worker, recording, after_drain=holder.commit))

    assert receiver.count() == 1
    assert _ledger(database_url) == [("delivered", 200, 1, "evt_1")]
    assert _job_row(database_url, enqueued.id)["state"] == "ready"
    _run_to_end(database_url, job, enqueued.id)
    assert _job_row(database_url, enqueued.id)["state"] == "done"
    assert receiver.count() == 1  # no second POST


def test_a_late_answer_under_a_drain_names_the_endpoint_not_its_url(
    database_url, declare, receiver
):
    """R85: a 500 that comes back after the drain is recorded like any other (failed, counted
    against the endpoint), and its error names the endpoint by id: its URL, which may carry a
    token, is part of the endpoint and never stored."""
    receiver.script = lambda _r, _i: Answer(500, hold=1.0, body=b"down")
    url = receiver.url("/hook/tok_a1b2c3d4")
    job = declare(Lookup(lambda _id, _n: durajobs.WebhookEndpoint(url, SECRET)))
    enqueued = job.enqueue(_event())
    worker = _worker(job, database_url)
    asyncio.run(_drain_once(worker, lambda: receiver.count() == 1))

    assert receiver.aborted == []
    ((outcome, status, error),) = fetch_all(
        database_url, "select outcome, status_code, error from jobs.webhook_attempts"
    )
    assert (outcome, status) == ("failed", 500)
    assert "endpoint 'ep_1'" in error
    assert "tok_a1b2c3d4" not in error
    assert _endpoint_row(database_url)[0] == 1
    assert _job_row(database_url, enqueued.id)["state"] == "ready"


# -- 11. the endpoint is read every attempt, its secret never stored ---------------------------


def test_a_rotated_secret_signs_the_next_attempt_and_no_secret_is_stored(
    database_url, declare, receiver
):
    token = uuid.uuid4().hex
    secrets = {1: f"whsec_first_{token}", 2: f"whsec_second_{token}"}
    lookup = Lookup(lambda _id, n: durajobs.WebhookEndpoint(receiver.url(), secrets[min(n, 2)]))
    receiver.script = _statuses(500, 200)
    job = declare(lookup)
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    assert lookup.calls == [ENDPOINT, ENDPOINT]  # asked on every attempt
    first, second = receiver.requests
    assert verify(secrets[1], first.as_dict(), first.body)
    assert not verify(secrets[2], first.as_dict(), first.body)
    assert verify(secrets[2], second.as_dict(), second.body)
    assert not verify(secrets[1], second.as_dict(), second.body)
    assert _job_row(database_url, enqueued.id)["state"] == "done"
    assert _ledger(database_url) == [("failed", 500, 1, "evt_1"), ("delivered", 200, 2, "evt_1")]

    with psycopg.connect(database_url, autocommit=True) as connection:
        tables = [
            name
            for (name,) in connection.execute(
                "select tablename from pg_tables where schemaname = 'jobs' order by tablename"
            )
        ]
        assert {"jobs_live", "jobs_history", "steps", "webhook_attempts"} <= set(tables)
        holding = []
        for table in tables:
            query = sql.SQL("select count(*) from jobs.{} t where t::text like %s").format(
                sql.Identifier(table)
            )
            for secret in secrets.values():
                row = connection.execute(query, [f"%{secret}%"]).fetchone()
                assert row is not None
                if row[0]:
                    holding.append((table, secret))
        assert holding == []
        # and the columns named in the brief, read through the view
        for secret in secrets.values():
            found = connection.execute(
                "select count(*) from jobs.jobs where input::text like %(s)s "
                "or coalesce(last_error, '') like %(s)s "
                "or coalesce(last_error_stack, '') like %(s)s",
                {"s": f"%{secret}%"},
            ).fetchone()
            assert found == (0,)


# -- 12. an endpoint lookup that answers nothing usable --------------------------------------


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("unknown", "X_WEBHOOK_ENDPOINT_UNKNOWN"),
        ("a dict", "X_WEBHOOK_ENDPOINT_INVALID"),
        ("ftp", "X_WEBHOOK_ENDPOINT_INVALID"),
        ("a number header", "X_WEBHOOK_ENDPOINT_INVALID"),
    ],
)
def test_a_lookup_with_no_usable_endpoint_ends_dead_without_a_request(
    database_url, declare, receiver, answer, code
):
    answers = {
        "unknown": None,
        "a dict": {"url": receiver.url(), "secret": SECRET},
        "ftp": durajobs.WebhookEndpoint(f"ftp://127.0.0.1:{receiver.port}/hook", SECRET),
        "a number header": durajobs.WebhookEndpoint(receiver.url(), SECRET, {"x-retries": 3}),  # type: ignore[dict-item]
    }
    lookup = Lookup(lambda _id, _n: answers[answer])
    job = declare(lookup)
    enqueued = job.enqueue(_event())
    _run_to_end(database_url, job, enqueued.id)

    row = _job_row(database_url, enqueued.id)
    assert (row["state"], row["attempt"], row["code"]) == ("dead", 1, code)
    assert lookup.calls == [ENDPOINT]
    assert receiver.count() == 0
    assert _ledger(database_url) == []


# -- 13. the row's tenant ---------------------------------------------------------------------


def test_a_row_whose_tenant_is_not_its_events_is_refused_before_the_lookup(
    database_url, declare, receiver
):
    lookup = _endpoint_at(receiver)
    job = declare(lookup, tenant=lambda event: event.tenant_id)
    event = _event(tenant_id="acme")
    ((job_id,),) = fetch_all(
        database_url,
        "select (jobs.enqueue(name => %s, input => %s, idempotency_key => %s, tenant_id => %s)).id",
        [NAME, Jsonb(event.model_dump(mode="json")), f"{NAME}:{ENDPOINT}:evt_1", "globex"],
    )
    _run_to_end(database_url, job, job_id)

    row = _job_row(database_url, job_id)
    assert (row["state"], row["attempt"], row["code"]) == ("dead", 1, "X_JOB_TENANT_MISMATCH")
    assert lookup.calls == []
    assert receiver.count() == 0
    assert _ledger(database_url) == []


# -- 14. a drain's late answer stands for the attempt it interrupted ----------------------------


@pytest.mark.parametrize(
    ("answer", "outcome", "code"),
    [
        (Answer(400, hold=1.0, body=b"no such hook"), "rejected", "X_WEBHOOK_DELIVERY_REJECTED"),
        (Answer(500, hold=1.0, body=b"down"), "failed", "X_WEBHOOK_DELIVERY_FAILED"),
    ],
)
def test_the_answer_a_drained_attempt_got_is_taken_not_sent_again(
    database_url, declare, receiver, answer, outcome, code
):
    """R85: a 400 (or a 500) that came back after the drain is recorded once; the attempt, run
    again by the next worker (a drain does not count it), takes that answer instead of sending
    again: dead at once for the 400, retried for the 500 (whose retry does send)."""
    receiver.script = lambda _r, index: answer if index == 0 else Answer(200)
    job = declare(
        _endpoint_at(receiver), retry=RetryPolicy.of(attempts=2, delay="10ms", jitter=False)
    )
    enqueued = job.enqueue(_event())
    asyncio.run(_drain_once(_worker(job, database_url), lambda: receiver.count() == 1))
    assert _ledger(database_url) == [(outcome, answer.status, 1, "evt_1")]
    assert _endpoint_row(database_url)[0] == 1  # counted once

    _run_to_end(database_url, job, enqueued.id)
    row = _job_row(database_url, enqueued.id)
    if outcome == "rejected":
        assert (row["state"], row["attempt"], row["code"]) == ("dead", 1, code)
        assert receiver.count() == 1  # the 400 was not asked for again
        assert len(_ledger(database_url)) == 1
    else:
        assert (row["state"], row["attempt"]) == ("done", 2)
        assert receiver.count() == 2  # the retry, attempt 2, sent once more
        assert _ledger(database_url) == [
            ("failed", 500, 1, "evt_1"),
            ("delivered", 200, 2, "evt_1"),
        ]


def test_a_throttled_answer_under_a_drain_keeps_its_stated_wait(database_url, declare, receiver):
    """R85: a 429 with Retry-After that came back after the drain is not forgotten: the attempt
    run again takes it and waits out what is left of the stated time, without a request."""
    receiver.script = lambda _r, _i: Answer(429, hold=1.0, headers={"Retry-After": "120"})
    job = declare(_endpoint_at(receiver), retry=RetryPolicy.of(attempts=3, max_delay="1h"))
    enqueued = job.enqueue(_event())
    asyncio.run(_drain_once(_worker(job, database_url), lambda: receiver.count() == 1))
    (recorded,) = fetch_all(database_url, "select retry_after_seconds from jobs.webhook_attempts")
    assert recorded == (120.0,)

    def waiting_again() -> bool:
        row = _job_row(database_url, enqueued.id)
        return row["code"] == "X_WEBHOOK_DELIVERY_THROTTLED"

    asyncio.run(run_until(_worker(job, database_url), waiting_again))
    row = _job_row(database_url, enqueued.id)
    assert row["state"] in ("ready", "delayed")
    assert row["attempt"] == 1  # the drained attempt, taken again: one counted
    assert 110 < row["due_in"] <= 120 * 1.25 + 5
    assert receiver.count() == 1


def test_a_connection_dropped_under_a_drain_is_one_failure(database_url, declare, receiver):
    """R85: the request was sent and the endpoint hung up without answering while the drain
    waited: one failed attempt in the ledger (never two), counted once."""
    receiver.script = lambda _r, _i: Answer(200, hold=1.0, drop=True)
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    asyncio.run(_drain_once(_worker(job, database_url), lambda: receiver.count() == 1))
    ((outcome, status, _attempt, _event_id),) = _ledger(database_url)
    assert (outcome, status) == ("failed", None)
    assert _endpoint_row(database_url)[0] == 1
    assert _job_row(database_url, enqueued.id)["state"] == "ready"


# -- 15. a cancel or a lost lease records nothing either ------------------------------------


def test_an_operator_cancel_aborts_the_request_and_records_nothing(database_url, declare, receiver):
    """R84: cancelled while the endpoint holds the request: the request is abandoned, and no
    ledger row counts it against the endpoint."""
    receiver.script = lambda _r, _i: Answer(500, hold=3.0)
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    worker = Worker(job.registry, database_url, listen=False, visibility=timedelta(seconds=1))

    def cancelled() -> bool:
        if receiver.count() == 1 and not cancelled.done:  # type: ignore[attr-defined]
            cancelled.done = True  # type: ignore[attr-defined]
            fetch_all(database_url, "select jobs.cancel(id => %s)", [enqueued.id])
        return bool(receiver.aborted) and worker.stats().in_flight == 0

    cancelled.done = False  # type: ignore[attr-defined]
    asyncio.run(asyncio.wait_for(run_until(worker, cancelled), timeout=10))
    assert _job_row(database_url, enqueued.id)["state"] == "cancelled"
    assert _ledger(database_url) == []
    assert _endpoint_row(database_url) is None


def test_a_lost_lease_aborts_the_request_and_records_nothing(database_url, declare, receiver):
    """R84: another claim took the row while the request was held (the lease lapsed): the
    request is abandoned and nothing is recorded."""
    receiver.script = lambda _r, _i: Answer(500, hold=3.0)
    job = declare(_endpoint_at(receiver))
    enqueued = job.enqueue(_event())
    worker = Worker(job.registry, database_url, listen=False, visibility=timedelta(seconds=1))

    def lost() -> bool:
        if receiver.count() == 1 and not lost.done:  # type: ignore[attr-defined]
            lost.done = True  # type: ignore[attr-defined]
            # what a second claimer does to a lapsed row: the fence moves past this attempt
            fetch_all(
                database_url,
                "update jobs.jobs_live set claims = claims + 1, claimed_by = 'thief' where id = %s",
                [enqueued.id],
            )
        return bool(receiver.aborted) and worker.stats().in_flight == 0

    lost.done = False  # type: ignore[attr-defined]
    asyncio.run(asyncio.wait_for(run_until(worker, lost), timeout=10))
    assert _ledger(database_url) == []
    assert _endpoint_row(database_url) is None


# -- 16. tenants ------------------------------------------------------------------------------


def test_two_tenants_endpoints_of_one_id_are_two_endpoints(database_url, declare, receiver):
    """One tenant's ep_1 failing never disables another's, and one's delivery of evt_1 is not
    the other's."""
    receiver.script = lambda request, _i: Answer(500 if b"acme" in request.body else 200)
    job = declare(
        _endpoint_at(receiver),
        tenant=lambda event: event.tenant_id,
        disable_after=1,
        retry=RetryPolicy.of(attempts=1),
    )
    acme = job.enqueue(_event(tenant_id="acme", payload={"who": "acme"}))
    _run_to_end(database_url, job, acme.id)
    globex = job.enqueue(_event(tenant_id="globex", payload={"who": "globex"}))
    _run_to_end(database_url, job, globex.id)
    assert _job_row(database_url, acme.id)["code"] == "X_WEBHOOK_DELIVERY_FAILED"
    assert _job_row(database_url, globex.id)["state"] == "done"
    assert receiver.count() == 2
    rows = fetch_all(
        database_url,
        "select tenant_key, consecutive_failures, disabled_at is not null"
        " from jobs.webhook_endpoints order by tenant_key",
    )
    assert rows == [("acme", 1, True), ("globex", 0, False)]
    # and a redelivery of acme's evt_1 is not answered by globex's delivery
    assert fetch_all(
        database_url,
        "select delivered_at is null from jobs.webhook_check_v1(webhook => %s,"
        " endpoint_id => %s, event_id => 'evt_1', tenant_id => 'acme')",
        [NAME, ENDPOINT],
    ) == [(True,)]
