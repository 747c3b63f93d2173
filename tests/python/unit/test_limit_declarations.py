"""Concurrency limits as declared: checked at import time, the key derived at enqueue."""

from __future__ import annotations

import pytest

import durajobs
from durajobs import Concurrency, DeclarationInvalid
from support.factory import declare
from support.models import Item


def _declare(concurrency: object) -> durajobs.Job[Item]:
    registry = durajobs.Registry()

    @declare(registry, "limited", concurrency=concurrency)
    def handler(ctx): ...

    return handler


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", Concurrency(key=str, limit=0)])
def test_an_impossible_limit_is_refused_at_declaration(bad):
    with pytest.raises(DeclarationInvalid, match="at least 1") as refused:
        _declare(bad)
    assert refused.value.code == "X_JOB_DECLARATION_INVALID"


def test_a_key_that_is_not_a_function_is_refused():
    with pytest.raises(DeclarationInvalid, match="function of the input"):
        _declare(Concurrency(key="account", limit=1))  # type: ignore[arg-type]


def test_a_job_limit_sends_no_key_and_a_keyed_limit_sends_the_inputs():
    assert _declare(2).request({"key": "a"}).concurrency_key is None
    keyed = _declare(Concurrency(key=lambda item: f"acct-{item.key}", limit=1))
    request = keyed.request({"key": "7"})
    assert request.concurrency_key == "acct-7"
    assert request.call().params["concurrency_key"] == "acct-7"
    assert request.staged_call().params["concurrency_key"] == "acct-7"
    assert request.fire_entry()["concurrency_key"] == "acct-7"


@pytest.mark.parametrize("bad", ["", "   ", "k" * 201, None, 7])
def test_a_bad_key_is_refused_at_enqueue_naming_the_job(bad):
    keyed = _declare(Concurrency(key=lambda item: bad, limit=1))
    with pytest.raises(durajobs.ArgumentInvalid, match="job limited: its concurrency key"):
        keyed.request({"key": "a"})


def test_a_key_that_raises_is_refused_at_enqueue_with_the_cause():
    def key(item: object) -> str:
        raise KeyError("account_id")

    keyed = _declare(Concurrency(key=key, limit=1))
    with pytest.raises(durajobs.ArgumentInvalid, match="its concurrency key raised") as refused:
        keyed.request({"key": "a"})
    assert isinstance(refused.value.__cause__, KeyError)
    assert refused.value.detail["argument"] == "concurrency_key"


def test_the_declaration_reaches_the_catalogue_call_and_the_description():
    keyed = _declare(Concurrency(key=lambda item: item.key, limit=3))
    params = keyed.declaration(declared_by="t").params
    assert (params["concurrency"], params["concurrency_keyed"]) == (3, True)
    assert keyed.describe()["concurrency"] == {"limit": 3, "keyed": True, "when_busy": "wait"}
    plain = _declare(None)
    assert "concurrency" not in plain.declaration(declared_by="t").params
    assert plain.describe()["concurrency"] is None


def test_an_unknown_busy_rule_is_refused():
    with pytest.raises(DeclarationInvalid, match="when_busy"):
        _declare(Concurrency(key=str, limit=1, when_busy="later"))  # type: ignore[arg-type]


def test_the_busy_rule_reaches_the_catalogue_call():
    fails = _declare(Concurrency(key=lambda item: item.key, limit=1, when_busy="fail"))
    assert fails.declaration(declared_by="t").params["when_busy"] == "fail"
    assert fails.describe()["concurrency"]["when_busy"] == "fail"
