"""Webhook signatures (items 198, 199): what a delivery is signed with, and the receiver's check."""

from __future__ import annotations

import pytest

import durajobs
from durajobs.webhooks import SIGNATURE_HEADER, signature, signed_headers, verify

SECRET = "whsec_test"
BODY = b'{"amount":42}'
AT = 1_700_000_000


def test_the_signature_is_hmac_sha256_over_the_scheme_time_id_topic_and_body():
    # a fixed vector: hmac.new(b"whsec_test", b"v1:1700000000:evt_1:invoice.paid:" + BODY,
    # sha256); a change of the signed text's layout breaks every receiver, and this
    assert signature(SECRET, "evt_1", "invoice.paid", BODY, AT) == (
        "t=1700000000,v1=bd2fbbd9a676d5856e4f79c13b633bccfe602d39a86f2eb636a0512925b3d75f"
    )


def test_a_retry_is_signed_anew_at_its_own_sending_time():
    first = signed_headers(SECRET, "evt_1", "invoice.paid", BODY, at=AT)
    again = signed_headers(SECRET, "evt_1", "invoice.paid", BODY, at=AT + 60)
    assert first["durajobs-webhook-id"] == "evt_1"
    assert first["durajobs-webhook-topic"] == "invoice.paid"
    assert first[SIGNATURE_HEADER] != again[SIGNATURE_HEADER]
    assert again[SIGNATURE_HEADER].startswith(f"t={AT + 60},v1=")


@pytest.mark.parametrize(
    ("event_id", "topic"),
    [("evt:1", "invoice.paid"), ("evt_1", "invoice:paid"), ("", "t"), ("e", " t"), ("e", "")],
)
def test_an_id_or_topic_that_cannot_be_signed_unambiguously_is_refused(event_id, topic):
    """R86: a ':' inside either would let two different pairs sign the same text."""
    with pytest.raises(durajobs.WebhookEventInvalid):
        signature(SECRET, event_id, topic, BODY, AT)


def test_the_receiver_accepts_a_fresh_signature_whatever_the_header_case():
    headers = signed_headers(SECRET, "evt_1", "invoice.paid", BODY, at=AT)
    assert verify(SECRET, headers, BODY, now=AT + 10)
    shouting = {name.upper(): value for name, value in headers.items()}
    assert durajobs.webhooks.verify(SECRET.encode(), shouting, BODY, now=AT - 10)


@pytest.mark.parametrize(
    "change",
    [
        "body",
        "topic",
        "event id",
        "secret",
        "stale",
        "from the future",
        "no signature",
        "malformed",
        "other scheme",
        "re-dated",
    ],
)
def test_the_receiver_refuses_anything_else(change):
    """R86 among them: a capture re-dated (its t changed) no longer verifies."""
    headers = signed_headers(SECRET, "evt_1", "invoice.paid", BODY, at=AT)
    body, secret, now = BODY, SECRET, AT + 10
    if change == "body":
        body = b'{"amount":4200}'
    elif change == "topic":
        headers["durajobs-webhook-topic"] = "invoice.voided"
    elif change == "event id":
        headers["durajobs-webhook-id"] = "evt_2"
    elif change == "secret":
        secret = "whsec_other"
    elif change == "stale":
        now = AT + 301
    elif change == "from the future":
        now = AT - 301
    elif change == "no signature":
        del headers[SIGNATURE_HEADER]
    elif change == "re-dated":
        # a capture replayed an hour later with its time moved to look fresh
        headers[SIGNATURE_HEADER] = headers[SIGNATURE_HEADER].replace(f"t={AT}", f"t={AT + 3600}")
        now = AT + 3600
    elif change == "malformed":
        headers[SIGNATURE_HEADER] = "t=soon,v1=zz"
    else:
        headers[SIGNATURE_HEADER] = headers[SIGNATURE_HEADER].replace("v1=", "v0=")
    assert not verify(secret, headers, body, now=now)
