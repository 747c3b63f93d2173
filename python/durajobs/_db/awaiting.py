"""Waiting for jobs to finish, sync and async: one connection a wait, listening on
`jobs_settled` and reading the jobs' outcomes again on every notice, with a poll as the guarantee.

Every statement that ends jobs (ack, nack to failed or dead, cancel) notifies `jobs_settled` once;
the notice names nothing, so a wait reads its own jobs again (`jobs.results`, one statement for
all of them). A notice lost with a dropped connection costs at most one poll: the wait connects
again and reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from uuid import UUID

import psycopg

from durajobs._db import calls
from durajobs._db.execute import execute, execute_async
from durajobs._values.records import JobOutcome

SETTLED_CHANNEL = "jobs_settled"

# asked with the outcomes read so far: raises when a wait can never end (a job no session can
# see, say), or returns to keep waiting
CheckMissing = Callable[[set[UUID]], None]


class WaitTimedOut(Exception):
    """The deadline passed first; `outcomes` holds what was read last."""

    def __init__(self, outcomes: dict[UUID, JobOutcome]) -> None:
        super().__init__("the wait timed out")
        self.outcomes = outcomes


def _settled(ids: Sequence[UUID], outcomes: dict[UUID, JobOutcome]) -> bool:
    return all(id in outcomes and outcomes[id].finished for id in ids)


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
                while True:
                    outcomes = _by_id(execute(connection, calls.results(ids)))
                    check_missing(set(ids) - outcomes.keys())
                    if _settled(ids, outcomes):
                        return outcomes
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise WaitTimedOut(outcomes)
                    for _notice in connection.notifies(timeout=min(poll, remaining), stop_after=1):
                        pass
        except psycopg.OperationalError:
            # the connection dropped (its notices with it): connect again after a poll
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimedOut(outcomes) from None
            time.sleep(min(poll, remaining))


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
                while True:
                    outcomes = _by_id(await execute_async(connection, calls.results(ids)))
                    check_missing(set(ids) - outcomes.keys())
                    if _settled(ids, outcomes):
                        return outcomes
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise WaitTimedOut(outcomes)
                    async for _notice in connection.notifies(
                        timeout=min(poll, remaining), stop_after=1
                    ):
                        pass
        except psycopg.OperationalError:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise WaitTimedOut(outcomes) from None
            await asyncio.sleep(min(poll, remaining))


def _by_id(outcomes: list[JobOutcome]) -> dict[UUID, JobOutcome]:
    return {outcome.id: outcome for outcome in outcomes}
