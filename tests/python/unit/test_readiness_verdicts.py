"""The verdicts /readyz answers, from a worker's state on one clock."""

from __future__ import annotations

from durajobs.observe.health import judge

FRESH = {
    "now": 100.0,
    "within": 30.0,
    "accepting": True,
    "last_answer": 95.0,
    "last_pass": 95.0,
    "at_capacity": False,
    "listening": True,
    "wake_down_since": None,
}


def test_a_worker_doing_its_work_is_ready():
    verdict = judge(**FRESH)  # type: ignore[arg-type]
    assert verdict.ready
    assert verdict.checks == {"accepting": "ok", "database": "ok", "claim_loop": "ok", "wake": "ok"}


def test_each_silence_longer_than_the_window_is_named():
    verdict = judge(**{**FRESH, "last_answer": 60.0, "last_pass": None})  # type: ignore[arg-type]
    assert not verdict.ready
    assert verdict.checks["database"] == "no answer from the database for 40.0 s"
    assert verdict.checks["claim_loop"] == "no claim pass yet"


def test_a_full_worker_needs_no_pass_and_a_draining_one_is_not_ready():
    assert judge(**{**FRESH, "last_pass": 1.0, "at_capacity": True}).ready  # type: ignore[arg-type]
    draining = judge(**{**FRESH, "accepting": False})  # type: ignore[arg-type]
    assert draining.checks["accepting"] == "draining"
    assert not draining.ready


def test_the_wake_may_be_down_for_less_than_the_window():
    assert judge(**{**FRESH, "wake_down_since": 80.0}).ready  # type: ignore[arg-type]
    down = judge(**{**FRESH, "wake_down_since": 50.0})  # type: ignore[arg-type]
    assert down.checks["wake"] == "LISTEN session down for 50.0 s"
    assert "wake" not in judge(**{**FRESH, "listening": False}).checks  # type: ignore[arg-type]
