"""The cancellation an attempt carries: set once, with the error that says why.

The deadline, the drain, a lost lease and an operator's cancel all set the same signal; the
verdict on the attempt is read off the signal's reason, never off whatever the body raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from durajobs.errors import Aborted, DurajobsError


class CancelSignal:
    """A one-shot, thread-safe cancellation with a reason."""

    def __init__(self) -> None:
        # made only when a thread waits: most attempts never do, and every attempt has a signal
        self._event: threading.Event | None = None
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[DurajobsError], object]] = []
        self.reason: DurajobsError | None = None

    def cancel(self, reason: DurajobsError) -> bool:
        """Set the signal; the first reason wins. Answers whether this call set it."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = reason
            callbacks = list(self._callbacks)
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks:
            callback(reason)
        return True

    def on_cancel(self, callback: Callable[[DurajobsError], object]) -> None:
        """Call `callback(reason)` when the signal is set (at once if it already is)."""
        with self._lock:
            if self.reason is None:
                self._callbacks.append(callback)
                return
            reason = self.reason
        callback(reason)

    def forget_callbacks(self) -> None:
        """Drop the callbacks not yet called: the attempt is over. They close over the attempt
        that holds this signal, so keeping them would leave a cycle for the collector. One
        assignment: no lock needed to swap the list."""
        self._callbacks = []

    @property
    def is_set(self) -> bool:
        return self.reason is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block a thread until the signal is set or `timeout` seconds pass."""
        with self._lock:
            if self.reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def raise_if_set(self) -> None:
        """Raise X_ABORTED (carrying the reason) if the signal is set."""
        if self.reason is not None:
            raise Aborted(
                f"the attempt was cancelled: {self.reason}",
                detail={"reason": self.reason.code},
            ) from self.reason
