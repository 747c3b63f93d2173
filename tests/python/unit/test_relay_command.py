"""`durajobs relay` takes the OutboxRelay settings, with a short claim lease by default."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durajobs.cli import main
from durajobs.services import relay as relay_module

URL = "postgresql://nowhere.invalid/app"


@pytest.fixture
def built(monkeypatch) -> list[Any]:
    relays: list[Any] = []

    async def run(self) -> None:
        relays.append(self)

    monkeypatch.setattr(relay_module.OutboxRelay, "run", run)
    return relays


def test_the_command_s_claim_lease_is_short_unless_told(built):
    assert main(["relay", "--database-url", URL]) == 0
    (relay,) = built
    assert relay.claim_lease == timedelta(seconds=5), "a killed relay holds rows back 5 s"
    assert relay.claim_lease < relay_module.DEFAULT_CLAIM_LEASE


def test_every_setting_reaches_the_relay(built):
    assert (
        main(
            [
                *("relay", "--database-url", URL, "--claim-lease", "2s", "--interval", "50ms"),
                *("--idle-ceiling", "1s", "--relay-id", "relay-7", "--batch-size", "10"),
            ]
        )
        == 0
    )
    (relay,) = built
    assert relay.claim_lease == timedelta(seconds=2)
    assert relay.relay_id == "relay-7"
    assert relay.batch_size == 10


def test_an_impossible_claim_lease_is_refused_with_its_code(built, capsys):
    assert main(["relay", "--database-url", URL, "--claim-lease", "0s"]) == 1
    assert "error: X_INVARIANT" in capsys.readouterr().err
    assert built == []
