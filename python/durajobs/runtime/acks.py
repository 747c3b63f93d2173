"""Acks grouped into one statement: while one `jobs.ack_many_v1` is on the wire, the acks that
arrive wait for the next one. A lone ack leaves at once (no timer, no added latency); under load
a worker sends one statement per batch instead of one per job. Each ack still learns whether it
landed, fenced on its own claim token, exactly as `jobs.ack_v1` would answer.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, TypeVar
from uuid import UUID

from durajobs._db import calls
from durajobs._values.records import SettleResult

T = TypeVar("T")

MAX_BATCH = 500


class Database(Protocol):
    async def run(self, call: calls.Call[T]) -> T: ...


class AckBatcher:
    """Sends one worker's acks in batches; `await ack(id, claim)` answers whether it landed."""

    def __init__(self, db: Database, worker_id: str, *, max_batch: int = MAX_BATCH) -> None:
        self._db = db
        self._worker_id = worker_id
        self._max_batch = max_batch
        self._waiting: list[tuple[UUID, int, asyncio.Future[bool]]] = []
        self._sender: asyncio.Task[None] | None = None
        self.statements = 0  # for tests and the benchmark

    async def _run(self, call: calls.Call[list[SettleResult]]) -> list[SettleResult]:
        self.statements += 1
        return await self._db.run(call)

    async def ack(self, id: UUID, claim: int) -> bool:
        return await self.ack_soon(id, claim)

    def ack_soon(self, id: UUID, claim: int) -> asyncio.Future[bool]:
        """Queue an ack; the future answers whether it landed (or holds the send's failure)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((id, claim, answer))
        if self._sender is None:
            self._sender = loop.create_task(self._send_all())
        return answer

    async def _send_all(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                await self._send(batch)
        finally:
            self._sender = None

    async def _send(self, batch: list[tuple[UUID, int, asyncio.Future[bool]]]) -> None:
        call = calls.ack_many(
            self._worker_id, [id for id, _, _ in batch], [claim for _, claim, _ in batch]
        )
        try:
            results = await self._run(call)
        except Exception:
            # one failure would cost every job of the batch a re-run after its lease lapses: try
            # once more (the pool drops a broken connection). Each ack is fenced on its claim, so
            # one that did land the first time answers false now, never a second settle.
            try:
                results = await self._run(call)
            except Exception as failure:
                for _id, _claim, answer in batch:
                    if not answer.done():
                        answer.set_exception(failure)
                return
        for (_id, _claim, answer), result in zip(batch, results, strict=True):
            if not answer.done():
                answer.set_result(result.landed)
