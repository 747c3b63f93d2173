"""Webhook signatures: what a durajobs webhook delivery sends, and how its receiver checks it.

A delivery carries three headers: the event's id, its topic, and a signature
`t=<unix seconds at sending>,v1=<hex HMAC-SHA256>` over `v1:<t>:<event id>:<topic>:<body>` with
the endpoint's secret. The time is the sending time, so a retry is signed anew, and a receiver
refuses a signature older than its tolerance: a captured request cannot be replayed later. The
id and the topic are inside the signed text, so neither can be swapped on a signed body; a `:`
in either is refused, or two different pairs could sign the same text.

The receiver's side, in a web handler (the body as the bytes received, before any parsing):

    if not durajobs.webhooks.verify(secret, request.headers, await request.body()):
        return Response(status_code=401)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

from durajobs.errors import WebhookEventInvalid

EVENT_ID_HEADER = "durajobs-webhook-id"
TOPIC_HEADER = "durajobs-webhook-topic"
SIGNATURE_HEADER = "durajobs-webhook-signature"
SCHEME = "v1"
DEFAULT_TOLERANCE = 300  # seconds a receiver accepts a signature for, either side of its clock


def check_label(field: str, value: str) -> None:
    if not isinstance(value, str) or not value or ":" in value or value != value.strip():
        raise WebhookEventInvalid(
            f"a webhook {field} must be non-blank text without ':' or surrounding space, "
            f"got {value!r}",
            detail={"field": field},
        )


def signature(secret: str | bytes, event_id: str, topic: str, body: bytes, at: int) -> str:
    """The signature header's value for `body` sent at unix second `at`."""
    check_label("event_id", event_id)
    check_label("topic", topic)
    key = secret.encode() if isinstance(secret, str) else secret
    signed = f"{SCHEME}:{at}:{event_id}:{topic}:".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).hexdigest()
    return f"t={at},{SCHEME}={digest}"


def signed_headers(
    secret: str | bytes, event_id: str, topic: str, body: bytes, at: int | None = None
) -> dict[str, str]:
    """The three headers of a delivery of `body`, signed now (or at `at`)."""
    sent = int(time.time()) if at is None else at
    return {
        EVENT_ID_HEADER: event_id,
        TOPIC_HEADER: topic,
        SIGNATURE_HEADER: signature(secret, event_id, topic, body, sent),
    }


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether `body` with `headers` was signed with `secret` within `tolerance` seconds of now.

    Header names are matched whatever their case. Answers False, never raises, for anything
    missing, malformed, stale or forged: a receiver answers all of them the same way."""
    found = {name.lower(): value for name, value in headers.items()}
    event_id = found.get(EVENT_ID_HEADER)
    topic = found.get(TOPIC_HEADER)
    stated = found.get(SIGNATURE_HEADER)
    if event_id is None or topic is None or stated is None:
        return False
    parts = dict(item.split("=", 1) for item in stated.split(",") if "=" in item)
    try:
        at = int(parts["t"])
        given = parts[SCHEME]
        expected = signature(secret, event_id, topic, body, at)
    except (KeyError, ValueError, WebhookEventInvalid):
        return False
    clock = time.time() if now is None else now
    if abs(clock - at) > tolerance:
        return False
    return hmac.compare_digest(expected, f"t={at},{SCHEME}={given}")
