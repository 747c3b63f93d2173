"""The one routing decision every enqueue takes, sync or async (no database needed)."""

from __future__ import annotations

import pytest

import durajobs
from durajobs.declare.router import Route, Router


class Transaction:
    """Stands for a caller's session: the router only passes it on."""


def test_no_transaction_goes_direct():
    assert Router(None, outbox=False, mode="direct").route(None) == Route(None, staged=False)
    assert Router(None, outbox=True, mode="direct").route(None) == Route(None, staged=False)


def test_a_transaction_without_an_outbox_is_joined():
    session = Transaction()
    assert Router(None, outbox=False, mode="direct").route(session) == Route(session, False)


def test_a_transaction_with_an_outbox_is_staged_unless_the_call_opts_out():
    session = Transaction()
    router = Router(None, outbox=True, mode="direct")
    assert router.route(session) == Route(session, staged=True)
    assert router.route(session, outbox=False) == Route(None, staged=False)


def test_the_ambient_transaction_counts_as_using():
    session = Transaction()
    router = Router(None, outbox=True, mode="required")
    with durajobs.in_transaction(session):
        assert router.route(None) == Route(session, staged=True)


def test_required_mode_refuses_an_enqueue_outside_a_transaction():
    with pytest.raises(durajobs.OutboxNoTransaction):
        Router(None, outbox=True, mode="required").route(None)


def test_no_database_and_no_transaction_names_the_fix():
    with pytest.raises(durajobs.DriverUnavailable, match="database_url"):
        Router(None, outbox=False, mode="direct")._pool()
