"""Webhooks: one event to one endpoint per job, signed, recorded, and given up on with care.

`Registry.webhook(...)` declares a job whose input is a `WebhookEvent` (the endpoint's id, the
event's id and topic, its payload) and whose body POSTs the event to the endpoint with httpx.
The fan-out (which endpoints hear which topic) is the application's loop: one enqueue per
endpoint, each with the idempotency key `<name>:<endpoint_id>:<event_id>`.

The rules, each with its reason:
- the endpoint (its URL, secret and headers) is read from the application's `endpoint`
  function on every attempt and never stored in a step or the ledger: a rotated secret or a
  moved URL applies to the next attempt, and no secret sits in the database;
- every attempt is signed at its sending time (durajobs.webhooks), so a retry carries a fresh
  timestamp; the endpoint's headers go under ours, so none can replace the signature;
- redirects are not followed: the signature is for the endpoint configured, and a 3xx is
  refused like a 4xx;
- every attempt that got an answer or a network failure is recorded in the ledger
  (jobs.webhook_attempts) before its error is raised; `disable_after` failures in a row disable
  the endpoint, and the ledger is asked before every request, so a disabled endpoint gets no
  more requests (re-enabling it is an operator's act);
- an attempt the worker abandoned (the job's deadline, a lost lease, a cancel) aborts its
  request and records nothing: it says nothing about the endpoint;
- a drain never cuts a request already sent: cut, it would be sent again by the next worker.
  It is finished and recorded, and the run's next attempt finds the delivery in the ledger and
  sends nothing; a drain before the request is sent stops it;
- 2xx is delivered; 429, or 503 with a Retry-After, is throttled (retried when the endpoint
  said, within the retry policy's max_delay); 408, 5xx and network failures are retried on the
  backoff; any other status is rejected and ends the job dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from durajobs._db import calls
from durajobs._values.records import WebhookCheck, WebhookRecorded
from durajobs._values.storable import plain_text
from durajobs.declare.factory import Context, call_off_loop
from durajobs.errors import (
    Draining,
    DurajobsError,
    WebhookDeliveryFailed,
    WebhookDeliveryRejected,
    WebhookDeliveryThrottled,
    WebhookEndpointDisabled,
    WebhookEndpointInvalid,
    WebhookEndpointUnknown,
)
from durajobs.webhooks import SIGNATURE_HEADER, check_label, signed_headers

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_DISABLE_AFTER = 10
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds
USER_AGENT = "durajobs-webhook"
ERROR_TEXT_LIMIT = 500  # characters of a response body kept in an error


class WebhookEvent(BaseModel):
    """A webhook job's input: which endpoint, which event, and the event's payload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint_id: str = Field(min_length=1, max_length=200)
    event_id: str = Field(min_length=1, max_length=200)
    topic: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any] = Field(default_factory=dict)
    tenant_id: str | None = None


@dataclass(frozen=True)
class WebhookEndpoint:
    """Where a delivery goes, as the application's `endpoint` function answers it per attempt:
    an http(s) URL, the secret the signature is made with, and headers of the endpoint's own
    (sent under durajobs', which they cannot replace)."""

    url: str
    secret: str | bytes = field(repr=False)
    headers: Mapping[str, str] = field(default_factory=dict)


EndpointLookup = Callable[[str], WebhookEndpoint | Awaitable[WebhookEndpoint | None] | None]


def delivery_key(name: str, event: WebhookEvent) -> str:
    """The idempotency key: one live delivery of an event to an endpoint."""
    check_label("endpoint_id", event.endpoint_id)
    check_label("event_id", event.event_id)
    check_label("topic", event.topic)
    return f"{name}:{event.endpoint_id}:{event.event_id}"


def encode(event: WebhookEvent) -> bytes:
    """The request body: the same bytes on every attempt, so a receiver may hash it."""
    document = {"id": event.event_id, "topic": event.topic, "data": event.payload}
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def retry_after_seconds(response: httpx.Response, now: datetime | None = None) -> float | None:
    """The wait a response's Retry-After states: delta-seconds, or an HTTP date read against
    the response's own Date (else our clock). Zero, a past date or nonsense is unstated."""
    stated = response.headers.get("retry-after", "").strip()
    if not stated:
        return None
    if stated.isascii() and stated.isdigit():
        seconds = float(stated)
        return seconds if seconds > 0 else None
    try:
        at = parsedate_to_datetime(stated)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    reference = now or datetime.now(UTC)
    sent = response.headers.get("date")
    if sent:
        with contextlib.suppress(TypeError, ValueError, IndexError):
            reference = parsedate_to_datetime(sent)
        if reference.tzinfo is None:
            reference = reference.replace(tzinfo=UTC)
    seconds = (at - reference).total_seconds()
    return seconds if seconds > 0 else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What an answered request was: its ledger outcome and, unless delivered, its error."""

    outcome: str
    error: DurajobsError | None


def judge(response: httpx.Response, where: str) -> Verdict:
    """The outcome of an answered request (see the module's head for the mapping)."""
    status = response.status_code
    if 200 <= status < 300:
        return Verdict("delivered", None)
    detail: dict[str, Any] = {"status": status, "endpoint": where}
    said = f"{where} answered {status}"
    wait = retry_after_seconds(response)
    if status == 429 or (status == 503 and wait is not None):
        detail["retry_after_seconds"] = wait
        return Verdict("throttled", WebhookDeliveryThrottled(said, retry_after=wait, detail=detail))
    # the receiver's words go into the job's error and the ledger: a NUL among them would make
    # the attempt's record fail, and a rejection turn into a retryable raw error
    body = (
        plain_text(response.text[:ERROR_TEXT_LIMIT], 4 * ERROR_TEXT_LIMIT)
        if response.content
        else ""
    )
    if body:
        said += f": {body}"
    if status == 408 or 500 <= status < 600:
        return Verdict("failed", WebhookDeliveryFailed(said, detail=detail))
    if 300 <= status < 400:
        said += " (a redirect, not followed: the signature is for the endpoint configured)"
    return Verdict("rejected", WebhookDeliveryRejected(said, detail=detail))


def _checked_endpoint(name: str, endpoint_id: str, endpoint: object) -> WebhookEndpoint:
    if endpoint is None:
        raise WebhookEndpointUnknown(
            f"webhook {name}: the endpoint lookup knows no endpoint {endpoint_id!r}",
            detail={"webhook": name, "endpoint_id": endpoint_id},
        )
    problem = None
    if not isinstance(endpoint, WebhookEndpoint):
        problem = f"answered {type(endpoint).__name__}, not a WebhookEndpoint"
    elif not isinstance(endpoint.url, str) or not endpoint.url.startswith(("http://", "https://")):
        problem = "its url is not http or https"
    elif not endpoint.secret:
        problem = "its secret is empty"
    elif not isinstance(endpoint.headers, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in endpoint.headers.items()
    ):
        problem = "its headers are not a mapping of text to text"
    if problem is not None:
        raise WebhookEndpointInvalid(
            f"webhook {name}: endpoint {endpoint_id!r}: {problem}",
            detail={"webhook": name, "endpoint_id": endpoint_id},
        )
    assert isinstance(endpoint, WebhookEndpoint)
    return endpoint


@dataclass(frozen=True)
class Webhook:
    """One declared webhook: where its endpoints come from and when to give one up."""

    name: str
    endpoint: EndpointLookup
    disable_after: int | None
    request_timeout: float

    async def run(self, ctx: Context[WebhookEvent]) -> dict[str, Any]:
        """The job's body: ask the ledger, read the endpoint, send, record, judge."""
        event = ctx.input
        check = await ctx._call_database(
            calls.webhook_check(
                self.name,
                event.endpoint_id,
                event.event_id,
                tenant_id=ctx.tenant_id,
                job_id=ctx.job_id,
                attempt=ctx.attempt,
            )
        )
        if check.delivered_at is not None:
            # an earlier attempt's request landed (a drain let it finish): never send twice
            return {"delivered": True, "replayed": True, "endpoint_id": event.endpoint_id}
        if check.this_outcome is not None:
            # this attempt was answered, then handed back by a drain uncounted: its answer
            # stands, as if the drain had not come
            raise self._handed_back(check)
        if check.disabled_at is not None:
            raise WebhookEndpointDisabled(
                f"webhook {self.name}: endpoint {event.endpoint_id!r} is disabled since "
                f"{check.disabled_at.isoformat()}",
                detail={"webhook": self.name, "endpoint_id": event.endpoint_id},
            )
        found = await call_off_loop(self.endpoint, event.endpoint_id)
        endpoint = _checked_endpoint(self.name, event.endpoint_id, found)
        body = encode(event)
        ctx.signal.raise_if_set()  # a drain before the request is sent stops it
        ours = signed_headers(endpoint.secret, event.event_id, event.topic, body)
        ours_lower = {name.lower() for name in ours} | {SIGNATURE_HEADER}
        headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        headers.update(
            (key, value) for key, value in endpoint.headers.items() if key.lower() not in ours_lower
        )
        headers.update(ours)
        sent = _Sent()
        delivery = asyncio.ensure_future(self._deliver(ctx, endpoint.url, body, headers, sent))
        try:
            return await asyncio.shield(delivery)
        except asyncio.CancelledError:
            if not (sent.sent and isinstance(ctx.signal.reason, Draining)):
                # the deadline, a lost lease, a cancel: abandon the request, record nothing
                delivery.cancel()
                raise
            # a drain once the request is on the wire: it finishes and its answer is recorded
            # (cut, the next worker would send it again); then the run is handed back, and the
            # same attempt, run again, takes the recorded answer
            await asyncio.wait({delivery})
            if not delivery.cancelled():
                delivery.exception()  # retrieved: the drain is what this attempt reports
            raise

    async def _deliver(
        self,
        ctx: Context[WebhookEvent],
        url: str,
        body: bytes,
        headers: dict[str, str],
        sent: _Sent,
    ) -> dict[str, Any]:
        """Send, record what came back, judge: one task, so that under a drain the whole of it
        (the request, closing its connection, the ledger's row) finishes together."""
        event = ctx.input
        began = time.monotonic()
        try:
            async with httpx.AsyncClient(
                timeout=self.request_timeout,
                follow_redirects=False,
                event_hooks={"request": [sent.mark]},
            ) as client:
                response = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as failure:
            error = WebhookDeliveryFailed(
                f"webhook {self.name}: {endpoint_id_text(event)}: {type(failure).__name__}: "
                f"{failure}",
                detail={"webhook": self.name, "endpoint_id": event.endpoint_id},
            )
            await self._record(ctx, Verdict("failed", error), None, began)
            raise error from None
        verdict = judge(response, endpoint_id_text(event))
        recorded = await self._record(ctx, verdict, response.status_code, began)
        if verdict.error is not None:
            if recorded.disabled:
                verdict.error.detail["disabled"] = True
            raise verdict.error
        return {
            "delivered": True,
            "status": response.status_code,
            "endpoint_id": event.endpoint_id,
            "event_id": event.event_id,
        }

    def _handed_back(self, check: WebhookCheck) -> DurajobsError:
        """The error of the answer a handed-back attempt got (never delivered: that one the
        delivered check answers)."""
        said = (
            f"webhook {self.name}: before a drain handed this attempt back, the endpoint "
            f"answered {check.this_status_code or check.this_error}"
        )
        detail: dict[str, Any] = {"webhook": self.name, "status": check.this_status_code}
        if check.this_outcome == "rejected":
            return WebhookDeliveryRejected(said, detail=detail)
        if check.this_outcome == "throttled":
            stated, age = check.this_retry_after_seconds, check.this_age_seconds or 0.0
            wait = None if stated is None else max(stated - age, 0.0)
            detail["retry_after_seconds"] = wait
            return WebhookDeliveryThrottled(said, retry_after=wait, detail=detail)
        return WebhookDeliveryFailed(said, detail=detail)

    async def _record(
        self, ctx: Context[WebhookEvent], verdict: Verdict, status: int | None, began: float
    ) -> WebhookRecorded:
        event = ctx.input
        error = verdict.error
        recorded = await ctx._call_database(
            calls.webhook_record(
                self.name,
                endpoint_id=event.endpoint_id,
                event_id=event.event_id,
                topic=event.topic,
                job_id=ctx.job_id,
                attempt=ctx.attempt,
                outcome=verdict.outcome,
                status_code=status,
                error=None if error is None else str(error),
                duration_ms=round((time.monotonic() - began) * 1000),
                disable_after=self.disable_after,
                tenant_id=ctx.tenant_id,
                retry_after_seconds=getattr(error, "retry_after", None),
            )
        )
        if recorded.disabled:
            log.warning(
                "jobs.webhook.endpoint-disabled",
                extra={
                    "webhook": self.name,
                    "endpoint_id": event.endpoint_id,
                    "failures": recorded.consecutive_failures,
                },
            )
        return recorded


class _Sent:
    """Whether a delivery's request has begun to go out (httpx's request hook)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = False

    async def mark(self, _request: httpx.Request) -> None:
        self.sent = True


def endpoint_id_text(event: WebhookEvent) -> str:
    return f"endpoint {event.endpoint_id!r}"
