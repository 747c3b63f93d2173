"""What an enqueue answers: the job's ids, and a way to wait for its result.

`handle = job.enqueue(...)`, then `await handle.result(timeout=30)` or `handle.wait(timeout=30)`.
A done job answers its result (validated into the job's `output` model when it declares one); a
failed or dead job raises JobFailed (or the durajobs error its stored code names); a cancelled
one raises JobCancelled; a job still running at the timeout raises JobResultTimeout and is left
alone. Waiting on a job whose enqueueing transaction is still open is refused (JobUncommitted):
no other session can see it, so the wait could never end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol
from uuid import UUID

from durajobs._db.awaiting import WaitTimedOut, wait_outcomes, wait_outcomes_async
from durajobs._values.durations import Duration, parse_duration
from durajobs._values.records import EnqueueResult, JobOutcome
from durajobs._values.states import JobState
from durajobs.errors import (
    DriverUnavailable,
    DurajobsError,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobResultTimeout,
    JobUncommitted,
    registered_errors,
)


class ResultReader(Protocol):
    """What a handle needs of its job (a declared Job): how its stored result reads back."""

    def read_result(self, stored: Any) -> Any: ...


DEFAULT_RESULT_TIMEOUT = timedelta(seconds=30)
# how often a wait reads its job when no notice comes: the guarantee behind LISTEN/NOTIFY
DEFAULT_RESULT_POLL = timedelta(seconds=1)


@dataclass(frozen=True, slots=True, eq=False)
class JobHandle(EnqueueResult):
    """An enqueued job: its ids, whether an existing job answered (`deduped`), and its result
    to await. Compares equal to another handle of the same job."""

    job: ResultReader | None = field(default=None, repr=False)
    database_url: str | None = field(default=None, repr=False)
    # staged in a transaction's outbox: the job exists once a relay publishes it
    staged: bool = False
    # answers True while the transaction that enqueued the job is still open
    open_transaction: Callable[[], bool] | None = field(default=None, repr=False)

    async def result(
        self, timeout: Duration = DEFAULT_RESULT_TIMEOUT, *, poll: Duration = DEFAULT_RESULT_POLL
    ) -> Any:
        """Wait for the job to finish and answer its result.

        Raises X_JOB_RESULT_TIMEOUT (the job is left alone), X_JOB_FAILED, X_JOB_CANCELLED,
        X_JOB_UNCOMMITTED, X_JOB_NOT_FOUND (the job never committed, or was purged)."""
        seconds, every = _seconds(timeout, poll)
        try:
            outcomes = await wait_outcomes_async(
                self._database(),
                [self.id],
                timeout=seconds,
                poll=every,
                check_missing=self._check_missing,
            )
        except WaitTimedOut as timed_out:
            raise self._timed_out(seconds, timed_out.outcomes.get(self.id)) from None
        return settled_value(outcomes[self.id], self.job)

    def wait(
        self, timeout: Duration = DEFAULT_RESULT_TIMEOUT, *, poll: Duration = DEFAULT_RESULT_POLL
    ) -> Any:
        """Blocking form of `result`, for code without an event loop."""
        seconds, every = _seconds(timeout, poll)
        try:
            outcomes = wait_outcomes(
                self._database(),
                [self.id],
                timeout=seconds,
                poll=every,
                check_missing=self._check_missing,
            )
        except WaitTimedOut as timed_out:
            raise self._timed_out(seconds, timed_out.outcomes.get(self.id)) from None
        return settled_value(outcomes[self.id], self.job)

    def _database(self) -> str:
        if self.database_url is None:
            raise DriverUnavailable(
                "this handle's registry has no database_url to wait on",
                detail={"id": str(self.id)},
                hint="durajobs.Registry(database_url=os.environ['DATABASE_URL'])",
            )
        return self.database_url

    def _check_missing(self, missing: set[UUID]) -> None:
        if not missing:
            return
        if self.open_transaction is not None and self.open_transaction():
            raise JobUncommitted(
                f"job {self.id} was enqueued in a transaction that is still open; commit it, "
                "then wait",
                detail={"id": str(self.id)},
            )
        if self.staged:
            return  # a relay publishes it after the commit: keep waiting
        raise JobNotFound(
            f"no job has id {self.id}: its transaction rolled back, or it was purged",
            detail={"id": str(self.id)},
        )

    def _timed_out(self, seconds: float, outcome: JobOutcome | None) -> JobResultTimeout:
        state = None if outcome is None else str(outcome.state)
        return JobResultTimeout(
            f"job {self.id} had not finished after {seconds:g} s (state {state}); it runs on",
            detail={"id": str(self.id), "state": state, "timeout_seconds": seconds},
        )


def settled_value(outcome: JobOutcome, job: ResultReader | None) -> Any:
    """A finished job's result, or the error its ending stands for."""
    if outcome.state is JobState.DONE:
        return outcome.result if job is None else job.read_result(outcome.result)
    raise failure_of(outcome)


def failure_of(outcome: JobOutcome) -> DurajobsError:
    """The error a failed, dead or cancelled job's stored outcome stands for: the durajobs class
    its code names, JobCancelled for a cancel, else JobFailed carrying the code."""
    detail = {
        "id": str(outcome.id),
        "state": str(outcome.state),
        "error": outcome.error,
        "error_code": outcome.error_code,
    }
    if outcome.state is JobState.CANCELLED:
        return JobCancelled(f"job {outcome.id} was cancelled: {outcome.error}", detail=detail)
    known = registered_errors().get(outcome.error_code or "")
    message = f"job {outcome.id} ended {outcome.state}: {outcome.error}"
    if known is not None and known is not JobFailed:
        return known(message, detail=detail)
    return JobFailed(message, detail=detail)


def _seconds(timeout: Duration, poll: Duration) -> tuple[float, float]:
    seconds = parse_duration(timeout, field="timeout").total_seconds()
    every = parse_duration(poll, field="poll").total_seconds()
    return seconds, max(every, 0.01)
