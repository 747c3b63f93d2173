"""Waiting for jobs to finish, sync and async: one connection a wait, listening on
`jobs_settled` and reading the jobs' outcomes again on every notice, with a poll as the guarantee.

Every statement that ends jobs notifies `jobs_settled` once while any caller is registered with
`jobs.await_results_v1` (as each wait is, for its length: a notifying commit takes a
cluster-wide lock, so nothing notifies while nobody waits). The notice names nothing, so a wait
reads its own jobs again (`jobs.results`, one statement for all of them). A notice lost with a
dropped connection costs at most one poll: the wait connects again and reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from uuid import UUID

import psycopg

from durajobs._db import calls
from durajobs._db.execute import execute, execute_async
from durajobs._values.records import JobOutcome

SETTLED_CHANNEL = "jobs_settled"
# a registration outlives its wait's deadline by this much: a wait that dies leaves it until then
REGISTRATION_MARGIN_SECONDS = 60.0

# asked with the ids not found: raises when a wait can never end (a job no session can see, say),
# or returns to keep waiting
CheckMissing = Callable[[set[UUID]], None]


class WaitTimedOut(Exception):
    """The deadline passed first; `outcomes` holds what was read last."""

    def __init__(self, outcomes: dict[UUID, JobOutcome]) -> None:
        super().__init__("the wait timed out")
        self.outcomes = outcomes


def _settled(ids: Sequence[UUID], outcomes: dict[UUID, JobOutcome]) -> bool:
    return all(id in outcomes and outcomes[id].finished for id in ids)


def _ttl(seconds_left: float) -> timedelta:
    """How long a registration holds: the wait's time left and a margin, within what
    jobs.await_results_v1 takes."""
    seconds = seconds_left + REGISTRATION_MARGIN_SECONDS
    return timedelta(seconds=min(max(seconds, 1.0), 86_400.0))


def _by_id(outcomes: list[JobOutcome]) -> dict[UUID, JobOutcome]:
    return {outcome.id: outcome for outcome in outcomes}


def wait_outcomes(
    database_url: str,
    ids: Sequence[UUID],
    *,
    timeout: float,
    poll: float,
    check_missing: CheckMissing,
) -> dict[UUID, JobOutcome]:
    """Block until every job of `ids` has finished; answer their outcomes by id.

    Raises WaitTimedOut past `timeout` seconds, and whatever `check_missing` raises."""
    deadline = time.monotonic() + timeout
    outcomes: dict[UUID, JobOutcome] = {}
    while True:
        try:
            with psycopg.connect(
                database_url, autocommit=True, application_name="durajobs-await"
            ) as connection:
                connection.execute(f"listen {SETTLED_CHANNEL}")
                left = deadline - time.monotonic()
                registration = execute(connection, calls.await_results(_ttl(left)))
                try:
                    while True:
                        outcomes = _by_id(execute(connection, calls.results(ids)))
                        check_missing(set(ids) - outcomes.keys())
                        if _settled(ids, outcomes):
                            return outcomes
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise WaitTimedOut(outcomes)
                        for _notice in connection.notifies(timeout=min(poll, left), stop_after=1):
                            pass
                finally:
                    if not connection.closed and not connection.broken:
                        execute(connection, calls.stop_awaiting(registration))
        except psycopg.OperationalError:
            # the connection dropped (its notices with it): connect again after a poll
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimedOut(outcomes) from None
            time.sleep(min(poll, left))


async def wait_outcomes_async(
    database_url: str,
    ids: Sequence[UUID],
    *,
    timeout: float,
    poll: float,
    check_missing: CheckMissing,
) -> dict[UUID, JobOutcome]:
    """Async form of `wait_outcomes`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    outcomes: dict[UUID, JobOutcome] = {}
    while True:
        try:
            connection = await psycopg.AsyncConnection.connect(
                database_url, autocommit=True, application_name="durajobs-await"
            )
            async with connection:
                await connection.execute(f"listen {SETTLED_CHANNEL}")
                left = deadline - loop.time()
                registration = await execute_async(connection, calls.await_results(_ttl(left)))
                try:
                    while True:
                        outcomes = _by_id(await execute_async(connection, calls.results(ids)))
                        check_missing(set(ids) - outcomes.keys())
                        if _settled(ids, outcomes):
                            return outcomes
                        left = deadline - loop.time()
                        if left <= 0:
                            raise WaitTimedOut(outcomes)
                        async for _notice in connection.notifies(
                            timeout=min(poll, left), stop_after=1
                        ):
                            pass
                finally:
                    if not connection.closed and not connection.broken:
                        await execute_async(connection, calls.stop_awaiting(registration))
        except psycopg.OperationalError:
            left = deadline - loop.time()
            if left <= 0:
                raise WaitTimedOut(outcomes) from None
            await asyncio.sleep(min(poll, left))
