"""Where an enqueue goes, decided once for the sync and async forms, and how it gets there.

A request joins the caller's transaction (given as `using=` or made ambient with
`in_transaction`), is staged in that transaction's outbox when the registry has one, or goes
straight to the registry's database on a pooled autocommit connection. `route` is the one
decision; `send` and `send_async` only differ in how they wait for the database.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from durajobs._db import calls
from durajobs._db.execute import check_schema, check_schema_async, execute, execute_async
from durajobs._db.pool import SyncPool
from durajobs._db.transactions import (
    async_connection,
    current_transaction,
    is_async,
    sync_connection,
)
from durajobs._values.records import EnqueueResult
from durajobs.client import Client
from durajobs.declare.enqueue import EnqueueRequest
from durajobs.errors import DeclarationInvalid, DriverUnavailable, OutboxNoTransaction

T = TypeVar("T")

Mode = Literal["direct", "required"]


@dataclass(frozen=True, slots=True)
class Route:
    """An enqueue's way out: the transaction it joins (None: the direct pool), and whether it
    is staged in the outbox rather than written as a job."""

    transaction: object | None
    staged: bool


class Router:
    """Send enqueue requests and other calls to a registry's database or a caller's transaction."""

    def __init__(self, database_url: str | None, *, outbox: bool, mode: Mode) -> None:
        self.database_url = database_url
        self.outbox = outbox
        self.mode = mode
        self._schema_checked = False  # once per router: a missing or old schema names the fix
        # made here (it opens at its first call) so two threads enqueuing first at once cannot
        # each make one
        self._direct = SyncPool(database_url) if database_url else None

    def route(self, using: object, *, outbox: bool = True) -> Route:
        """The decision: `outbox=False` skips a registry's outbox for this one enqueue."""
        transaction = using if using is not None else current_transaction()
        if transaction is None:
            if self.mode == "required":
                raise OutboxNoTransaction(
                    "this registry requires every enqueue to join a transaction, and none is open",
                    detail={},
                )
            return Route(None, staged=False)
        if not self.outbox:
            return Route(transaction, staged=False)
        if not outbox:
            return Route(None, staged=False)  # straight to the queue's own database
        return Route(transaction, staged=True)

    def send(self, request: EnqueueRequest, using: object, *, outbox: bool = True) -> EnqueueResult:
        route = self.route(using, outbox=outbox)
        return self.run(_call_for(request, route), route.transaction)

    async def send_async(
        self, request: EnqueueRequest, using: object, *, outbox: bool = True
    ) -> EnqueueResult:
        route = self.route(using, outbox=outbox)
        return await self.run_async(_call_for(request, route), route.transaction)

    def run(self, call: calls.Call[T], using: object = None) -> T:
        """Run `call` in `using`'s transaction, or on a pooled autocommit connection."""
        if isinstance(using, Client):
            return using.run(call)
        if using is not None:
            if is_async(using):
                raise DeclarationInvalid(
                    f"an async transaction ({type(using).__name__}) needs enqueue_async",
                    detail={"argument": "using", "type": type(using).__name__},
                    hint="await job.enqueue_async(..., using=...)",
                )
            connection = sync_connection(using)
            self._require_open(connection)
            self._check(connection)
            return execute(connection, call)
        return self._pool().run(call)

    async def run_async(self, call: calls.Call[T], using: object = None) -> T:
        """Async form of `run`; without a transaction the call takes the same pool as `run`, on
        a thread, so an event loop holds no connection of its own between enqueues."""
        if using is None:
            return await asyncio.to_thread(self._pool().run, call)
        connection = await async_connection(using)
        self._require_open(connection)
        await self._check_async(connection)
        return await execute_async(connection, call)

    def close(self) -> None:
        """Close the pooled connections (a later direct enqueue opens them again)."""
        if self._direct is not None:
            self._direct.close()

    def _pool(self) -> SyncPool:
        if self._direct is None:
            raise DriverUnavailable(
                "no database to enqueue into: pass using=<connection> or "
                "Registry(database_url=...)",
                detail={},
                hint="durajobs.Registry(database_url=os.environ['DATABASE_URL'])",
            )
        return self._direct

    def _require_open(
        self, connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
    ) -> None:
        """Under mode="required", refuse a connection in autocommit with no transaction open (a
        psycopg one outside `transaction()`, an AUTOCOMMIT engine's): what it writes commits at
        once, which is what the mode exists to rule out."""
        if (
            self.mode == "required"
            and connection.autocommit
            and connection.info.transaction_status == TransactionStatus.IDLE
        ):
            raise OutboxNoTransaction(
                "this registry requires every enqueue to join a transaction, and the connection "
                "given is in autocommit with none open",
                detail={},
                hint="with connection.transaction(): ... (or an engine without AUTOCOMMIT)",
            )

    def _check(self, connection: psycopg.Connection[Any]) -> None:
        if not self._schema_checked:
            check_schema(connection)  # a savepoint inside the caller's transaction
            self._schema_checked = True

    async def _check_async(self, connection: psycopg.AsyncConnection[Any]) -> None:
        if not self._schema_checked:
            await check_schema_async(connection)
            self._schema_checked = True


def _call_for(request: EnqueueRequest, route: Route) -> calls.Call[EnqueueResult]:
    return request.staged_call() if route.staged else request.call()
