"""The cancellation an attempt carries: set once, with the error that says why.

The deadline, the drain, a lost lease and an operator's cancel all set the same signal; the
verdict on the attempt is read off the signal's reason, never off whatever the body raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from durajobs.errors import Aborted, DurajobsError

# One lock for every signal: it is held for a few assignments, and a signal is set once, so
# signals never wait on each other for long; a lock of its own cost every attempt an allocation.
_LOCK = threading.Lock()


class CancelSignal:
    """A one-shot, thread-safe cancellation with a reason."""

    __slots__ = ("_callbacks", "_event", "listener", "reason")

    def __init__(self) -> None:
        # made only when a thread waits: most attempts never do, and every attempt has a signal
        self._event: threading.Event | None = None
        # made on the first on_cancel: a worker's attempt is told through `listener` instead
        self._callbacks: list[Callable[[DurajobsError], object]] | None = None
        self.reason: DurajobsError | None = None
        # the one callback of whoever made the signal, called first when it is set. Assigned
        # before the signal is shared (with a body, a thread or the lease renewer), so it needs
        # no lock: for a worker it is the attempt's own, and costs no list and no lock per job
        self.listener: Callable[[DurajobsError], object] | None = None

    def cancel(self, reason: DurajobsError) -> bool:
        """Set the signal; the first reason wins. Answers whether this call set it."""
        with _LOCK:
            if self.reason is not None:
                return False
            self.reason = reason
            callbacks = () if self._callbacks is None else tuple(self._callbacks)
            listener = self.listener
            event = self._event
        if event is not None:
            event.set()
        if listener is not None:
            listener(reason)
        for callback in callbacks:
            callback(reason)
        return True

    def on_cancel(self, callback: Callable[[DurajobsError], object]) -> None:
        """Call `callback(reason)` when the signal is set (at once if it already is)."""
        with _LOCK:
            if self.reason is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
            reason = self.reason
        callback(reason)

    def forget_callbacks(self) -> None:
        """Drop the callbacks not yet called, the listener among them: the attempt is over.
        They close over the attempt that holds this signal, so keeping them would leave a
        cycle for the collector. Assignments only: no lock needed."""
        self.listener = None
        if self._callbacks is not None:
            self._callbacks = None

    @property
    def is_set(self) -> bool:
        return self.reason is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block a thread until the signal is set or `timeout` seconds pass."""
        with _LOCK:
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
