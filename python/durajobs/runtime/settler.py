"""Settles sent in batches: one `jobs.ack_many_v1` for the acks, one `jobs.ack_results_v1` for the
acks that store a result, and one `jobs.nack_many_v1` for the nacks that arrive while the
statement before is on the wire.

A lone settle leaves at once (no timer, no added latency); under load a worker sends one
statement per batch instead of one per job, and the ack of one batch is on the wire while the
claim of the next is sent. Each settle still learns whether it landed, fenced on its own claim
token, exactly as `jobs.ack_v1` and `jobs.nack_v1` would answer. The answer reaches a callback,
not a future: an attempt that ended without suspending costs no task and no future to settle.
A batch that fails on the connection is sent once more; a batch refused for what it carries is
sent again one settle a statement, so only the settle it refused fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar
from uuid import UUID

from durajobs._db import calls
from durajobs._db.database import may_land_if_sent_again

T = TypeVar("T")

log = logging.getLogger(__name__)

MAX_BATCH = 500

# how a settle learns its end: (landed, None), or (False, the failure that stopped the send)
OnAnswer = Callable[[bool, BaseException | None], None]


class Database(Protocol):
    async def run(self, call: calls.Call[T]) -> T: ...


class _Lane:
    """One kind of settle (acks or nacks): the waiting ones, and the task sending them."""

    def __init__(
        self,
        db: Database,
        build: Callable[[list[Any]], calls.Call[list[bool]]],
        max_batch: int,
        on_sent: Callable[[], None],
        on_answered: Callable[[], None],
    ) -> None:
        self._db = db
        self._on_sent = on_sent
        self._on_answered = on_answered
        self._build = build
        self._max_batch = max_batch
        self.waiting: list[tuple[Any, OnAnswer]] = []
        self._sender: asyncio.Task[None] | None = None
        self.statements = 0

    def put(self, item: Any, on_answer: OnAnswer) -> None:
        self.waiting.append((item, on_answer))
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        try:
            while self.waiting:
                batch = self.waiting[: self._max_batch]
                del self.waiting[: self._max_batch]
                self._on_sent()
                await self._send(batch)
        finally:
            self._sender = None

    async def _send(self, batch: list[tuple[Any, OnAnswer]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(batch)} settles sent, {len(results)} answered")
        except Exception as failure:
            if len(batch) > 1 and not may_land_if_sent_again(failure):
                # refused for what it carries (an X_* code, a value jsonb will not hold): the
                # same statement would be refused again, and one settle it refuses must not
                # cost the others theirs (each would run again once its lease lapsed). Alone,
                # only the refused one fails
                for one in batch:
                    await self._send([one])
                return
            for _item, on_answer in batch:
                _answer(on_answer, False, failure)
            self._answered()
            return
        for (_item, on_answer), landed in zip(batch, results, strict=True):
            try:  # _answer, inline: a call per settle is a tenth of what answering it costs
                on_answer(landed, None)
            except Exception as crashed:
                log.error("jobs.settle.callback-failed", extra={"error": repr(crashed)})
        self._answered()

    async def _run(self, items: list[Any]) -> list[bool]:
        """One statement for `items`, sent once more when the connection failed it: a failure
        would cost every job of the batch a re-run after its lease lapses, and the pool drops a
        broken connection. Each settle is fenced on its claim, so one that did land the first
        time answers false the second, never a second settle."""
        call = self._build(items)
        self.statements += 1
        try:
            return await self._db.run(call)
        except Exception as failure:
            if not may_land_if_sent_again(failure):
                raise
        self.statements += 1
        return await self._db.run(call)

    def _answered(self) -> None:
        try:
            self._on_answered()
        except Exception as crashed:
            log.error("jobs.settle.callback-failed", extra={"error": repr(crashed)})


def _answer(on_answer: OnAnswer, landed: bool, failure: BaseException | None) -> None:
    try:
        on_answer(landed, failure)
    except Exception as crashed:  # one bad callback must not keep the rest of the batch waiting
        log.error("jobs.settle.callback-failed", extra={"error": repr(crashed)})


class Settler:
    """Sends one worker's acks and nacks in batches."""

    def __init__(
        self,
        db: Database,
        worker_id: str,
        *,
        max_batch: int = MAX_BATCH,
        on_sent: Callable[[], None] = lambda: None,
        on_answered: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_sent` is called when a batch leaves for the database, `on_answered` once every
        settle of a batch has had its answer."""
        self._acks = _Lane(
            db,
            lambda items: calls.ack_many_landed(
                worker_id, [id for id, _ in items], [claim for _, claim in items]
            ),
            max_batch,
            on_sent,
            on_answered,
        )
        self._nacks = _Lane(
            db,
            lambda items: calls.nack_many_landed(worker_id, items),
            max_batch,
            on_sent,
            on_answered,
        )
        # a body that returned a value: its own statement, so the acks of bodies that returned
        # None cost what they cost without results
        self._results = _Lane(
            db,
            lambda items: calls.ack_results_landed(
                worker_id,
                [id for id, _, _ in items],
                [claim for _, claim, _ in items],
                [result for _, _, result in items],
            ),
            max_batch,
            on_sent,
            on_answered,
        )

    @property
    def queued(self) -> int:
        """Settles waiting for a statement (not yet on the wire). A worker counts each as a
        slot still taken: the claim of batch k+1 overlaps the ack of batch k, never more, so
        finished rows cannot pile up unacked behind a slow database."""
        return len(self._acks.waiting) + len(self._nacks.waiting) + len(self._results.waiting)

    @property
    def statements(self) -> int:
        """Statements sent so far, both kinds (for tests and the benchmark)."""
        return self._acks.statements + self._nacks.statements + self._results.statements

    def ack_soon(self, id: UUID, claim: int, on_answer: OnAnswer) -> None:
        """Queue an ack; `on_answer` is called once it is answered."""
        self._acks.put((id, claim), on_answer)

    async def ack(self, id: UUID, claim: int, result: Any = None) -> bool:
        """Ack and wait, storing `result` (JSON) when it is not None: answers whether it
        landed; raises what stopped the send."""
        if result is None:
            return await _awaited(lambda on_answer: self.ack_soon(id, claim, on_answer))
        return await _awaited(lambda on_answer: self._results.put((id, claim, result), on_answer))

    async def nack(self, id: UUID, claim: int, options: Mapping[str, Any]) -> bool:
        """Nack (`options` as `jobs.nack_v1` names them) and wait: answers whether it landed;
        raises what stopped the send."""
        item = {"id": id, "claim": claim, **options}
        return await _awaited(lambda on_answer: self._nacks.put(item, on_answer))


async def _awaited(send: Callable[[OnAnswer], None]) -> bool:
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def answered(landed: bool, failure: BaseException | None) -> None:
        if answer.done():
            return
        if failure is not None:
            answer.set_exception(failure)
        else:
            answer.set_result(landed)

    send(answered)
    return await answer
