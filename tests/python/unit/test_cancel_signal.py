"""The cancellation an attempt carries: the first reason wins, and whoever made the signal is
told first through its listener, then every callback, each once."""

from __future__ import annotations

from durajobs.errors import Draining, JobTimeout
from durajobs.runtime.cancel import CancelSignal


def test_the_listener_is_told_first_then_each_callback_once():
    signal = CancelSignal()
    heard: list[tuple[str, str]] = []
    signal.listener = lambda reason: heard.append(("listener", reason.code))
    signal.on_cancel(lambda reason: heard.append(("callback", reason.code)))
    assert signal.cancel(Draining("draining", detail={})) is True
    assert signal.cancel(JobTimeout("late", detail={})) is False  # the first reason wins
    assert heard == [("listener", Draining.code), ("callback", Draining.code)]
    assert isinstance(signal.reason, Draining)


def test_a_callback_added_after_the_signal_is_set_runs_at_once():
    signal = CancelSignal()
    signal.cancel(Draining("draining", detail={}))
    heard: list[str] = []
    signal.on_cancel(lambda reason: heard.append(reason.code))
    assert heard == [Draining.code]


def test_a_forgotten_listener_and_callbacks_are_not_called():
    signal = CancelSignal()
    heard: list[str] = []
    signal.listener = lambda reason: heard.append("listener")
    signal.on_cancel(lambda reason: heard.append("callback"))
    signal.forget_callbacks()
    assert signal.cancel(Draining("draining", detail={})) is True
    assert heard == []
    assert signal.is_set


def test_a_waiting_thread_is_released_by_the_cancel():
    import threading

    signal = CancelSignal()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(signal.wait(5)))
    waiter.start()
    signal.cancel(Draining("draining", detail={}))
    waiter.join(5)
    assert woke == [True]
