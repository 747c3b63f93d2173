"""A stand-in for the lease a worker keeps, for tests that run one attempt without a worker."""

from __future__ import annotations


class HeldLease:
    """Held for the whole attempt: `stops` counts the attempt's calls to stop() (it stops it
    right before the settle); `late` is how far past its end the settle goes (none: held)."""

    def __init__(self, late: float = 0.0) -> None:
        self.stops = 0
        self.late = late

    def stop(self) -> None:
        self.stops += 1

    def overdue(self) -> float:
        return self.late if self.late > 0 else -1.0
