"""Backfills: a data migration that sweeps a table in keyset pages, resumable and paced, with a
ledger (jobs.backfills) that makes it a deploy gate.

`Registry.backfill(...)` declares a job whose body reads the application's rows a page at a
time (`source`, continued after the `key` of the last row: never OFFSET, which skips and repeats
rows while the table changes) and hands each page to `handle(rows, signal)`. Each page is one
durable step whose stored output is the cursor and a count, never the rows: a killed worker
resumes at the page it stopped on, and the pages before are not read again.

The rules, each with its reason:
- the backfill's name is its idempotency key: one live pass at a time;
- only a completed pass blocks: running the backfill again answers `skipped` with the pass that
  completed; `force` starts a new pass. A retry of a pass adopts its ledger row (its start
  kept), so one pass is one row however many attempts it takes;
- the ledger's counts are totals written inside the page's step: a page replayed from its
  checkpoint writes nothing, and a page run again after a crash writes the same totals;
- `rate` (pages a second, default 5) has no unthrottled mode, since a sweep at full speed
  starves the application's own queries; its pause is spent inside the step, so a resumed pass
  pays none for the pages it replays;
- `count()` (rows still to do), when declared, is asked after the last page: a positive answer
  means the source's keyset skips rows, and the pass fails X_BACKFILL_STALLED rather than
  report a sweep it did not make; an answer that is not a count fails X_INVARIANT (NaN > 0 and
  -1 > 0 are both false, so either would pass for done);
- `environments` names where it may run (empty: everywhere), checked in the pass and by the
  `durajobs backfill` gate; `requires` names the application's alembic revision its handler
  needs, checked by the gate;
- the checksum fingerprints the declaration (its source, key, handle and count, not its rate
  or batch): a completed pass whose checksum moved is reported, and never re-run by itself.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import math
import os
import types
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from durajobs._db import calls
from durajobs._values.counts import parse_count
from durajobs.declare.export import Page
from durajobs.declare.factory import Context, call_off_loop
from durajobs.errors import (
    ArgumentInvalid,
    BackfillEnvironment,
    BackfillMigrationPending,
    BackfillStalled,
    DeclarationInvalid,
    DurajobsError,
    Invariant,
)

log = logging.getLogger(__name__)

DEFAULT_BACKFILL_BATCH = 1000
MOST_BATCH = 100_000
DEFAULT_BACKFILL_RATE = 5.0  # pages a second
ENVIRONMENT_VARIABLE = "DURAJOBS_ENVIRONMENT"
DEFAULT_ENVIRONMENT = "development"
VERSION_TABLE = "alembic_version"  # the application's alembic version table
ALEMBIC_INI = "alembic.ini"  # the application's, in the worker's directory, when it has one


def current_environment() -> str:
    """Where this process runs: $DURAJOBS_ENVIRONMENT, else 'development'."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "").strip() or DEFAULT_ENVIRONMENT


class BackfillInput(BaseModel):
    """A backfill's job input: `force` starts a new pass even after one completed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    force: bool = False


Handle = Callable[[list[Any], Any], Awaitable[None] | None]


async def _pause(seconds: float) -> None:
    """A page's pause under `rate` (its own function, so a test can count the pauses)."""
    await asyncio.sleep(seconds)


@dataclass(frozen=True)
class Backfill:
    """One declared backfill: what its pass reads and hands on, and its ledger's facts."""

    name: str
    source: Callable[[Page], Sequence[Any] | Awaitable[Sequence[Any]]]
    key: Callable[[Any], Any]
    handle: Handle
    count: Callable[[], int | Awaitable[int]] | None
    requires: str | None
    environments: tuple[str, ...]
    batch: int
    rate: float
    checksum: str

    def runs_in(self, environment: str) -> bool:
        return not self.environments or environment in self.environments

    async def run(self, ctx: Context[BackfillInput]) -> dict[str, Any]:
        """The job's body: start or adopt the pass's ledger row, one step a page, then the
        count's check and the ledger's end."""
        environment = current_environment()
        if not self.runs_in(environment):
            raise BackfillEnvironment(
                f"backfill {self.name} runs in {', '.join(self.environments)}, not in "
                f"{environment} (${ENVIRONMENT_VARIABLE})",
                detail={"backfill": self.name, "environment": environment},
            )
        await self._check_requires(ctx)
        began = await ctx._call_database(
            calls.backfill_start(
                self.name,
                run_id=ctx.run_id,
                job_id=ctx.job_id,
                checksum=self.checksum,
                environment=environment,
                force=ctx.input.force,
                tenant_id=ctx.tenant_id,
            )
        )
        if began.outcome == "skipped":
            moved = began.previous_checksum != self.checksum
            if moved:
                log.warning(
                    "jobs.backfill.checksum-moved",
                    extra={"backfill": self.name, "previous_run_id": str(began.previous_run_id)},
                )
            log.info(
                "jobs.backfill.skipped",
                extra={
                    "backfill": self.name,
                    "previous_run_id": str(began.previous_run_id),
                    "checksum_moved": moved,
                },
            )
            return {
                "skipped": True,
                "previous_run_id": str(began.previous_run_id),
                "checksum_moved": moved,
                "batches": 0,
                "rows": 0,
            }
        try:
            batches, rows = await self._sweep(ctx)
            await self._check_count()
        except Exception as failure:
            if not ctx.signal.is_set:
                # interrupted (a drain, a lost lease) is not failed: the pass resumes
                text = str(failure) if isinstance(failure, DurajobsError) else repr(failure)
                await ctx._call_database(
                    calls.backfill_finish(ctx.run_id, status="failed", error=text)
                )
            raise
        await ctx._call_database(calls.backfill_finish(ctx.run_id, status="completed"))
        return {"skipped": False, "batches": batches, "rows": rows}

    async def _check_requires(self, ctx: Context[BackfillInput]) -> None:
        """The rail under the command's gate: a pass enqueued some other way (job.enqueue, SQL)
        still refuses to run before the application's migration it needs."""
        if self.requires is None:
            return
        heads: list[str] = []
        if await ctx._call_database(calls.relation_exists(VERSION_TABLE)):
            heads = [
                str(head) for head in await ctx._call_database(calls.alembic_heads(VERSION_TABLE))
            ]
        if not revision_applied(heads, self.requires, ALEMBIC_INI):
            raise BackfillMigrationPending(
                f"backfill {self.name} requires the application's migration {self.requires}, "
                "which the database has not applied",
                detail={"backfill": self.name, "requires": self.requires},
            )

    async def _sweep(self, ctx: Context[BackfillInput]) -> tuple[int, int]:
        after: Any = None
        rows = index = 0
        while True:
            page = functools.partial(self._page, ctx, index, after, rows)
            done = await ctx.step.run(f"batch:{index}", page)
            after, rows = done["cursor"], rows + done["rows"]
            index += 1
            # as the page found it, not by today's batch (see declare.export)
            if done["last"]:
                return index, rows

    async def _page(
        self, ctx: Context[BackfillInput], index: int, after: Any, rows_before: int, signal: Any
    ) -> dict[str, Any]:
        """Read page `index`, hand it on and record the totals; answer the cursor and the
        page's count (the step's output: never the rows)."""
        if index > 0:
            await _pause(1 / self.rate)  # inside the step: a replayed page pays none
        fetched = list(await call_off_loop(self.source, Page(after=after, limit=self.batch)))
        if len(fetched) > self.batch:
            raise ArgumentInvalid(
                f"backfill {self.name}: source answered {len(fetched)} rows for a page of "
                f"{self.batch}",
                detail={"backfill": self.name, "field": "source"},
            )
        if fetched:
            await call_off_loop(self.handle, fetched, signal)
        cursor = self.key(fetched[-1]) if fetched else after
        await ctx._call_database(
            calls.backfill_progress(
                ctx.run_id, batches=index + 1, rows_processed=rows_before + len(fetched)
            )
        )
        return {"cursor": cursor, "rows": len(fetched), "last": len(fetched) < self.batch}

    async def _check_count(self) -> None:
        if self.count is None:
            return
        left = await call_off_loop(self.count)
        if (
            isinstance(left, bool)
            or not isinstance(left, int | float)
            or not math.isfinite(left)
            or left != int(left)
            or left < 0
        ):
            raise Invariant(
                f"backfill {self.name}: count() must answer a whole number of at least 0, "
                f"got {left!r}",
                detail={"backfill": self.name, "field": "count"},
            )
        if left > 0:
            raise BackfillStalled(
                f"backfill {self.name}: the source ran out with {int(left)} rows still to do by "
                "count(); its keyset skips them",
                detail={"backfill": self.name, "left": int(left)},
            )


def revision_applied(
    heads: Sequence[str], revision: str, alembic_ini: str | Path | None = None
) -> bool:
    """Whether alembic revision `revision` is applied where the version table holds `heads`:
    it is one of them, or (given the application's alembic.ini) an ancestor of one."""
    if revision in heads:
        return True
    if not heads or alembic_ini is None or not Path(alembic_ini).exists():
        return False
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(Config(str(alembic_ini)))
    return any(
        script.revision == revision
        for head in heads
        for script in scripts.iterate_revisions(head, "base")
    )


def checksum_of(
    name: str,
    functions: Sequence[Callable[..., Any] | None],
    requires: str | None,
    environments: Sequence[str],
) -> str:
    """The declaration's fingerprint: what its functions do (their compiled code, not their
    source text, so a lambda sharing a line with `rate=` does not take the rate in), what it
    requires and where it runs; never its rate or batch."""
    digest = hashlib.sha256()
    for part in (name, requires or "", ",".join(sorted(environments))):
        digest.update(part.encode() + b"\0")
    for function in functions:
        digest.update(_fingerprint(function) + b"\0")
    return digest.hexdigest()[:16]


def _fingerprint(function: object) -> bytes:
    """What `function` does, as bytes: a function's code (instructions, names, constants, nested
    functions' too, and not its name or place: moved elsewhere it does the same); a partial's
    function and arguments; a callable object's class name and __call__; else its name."""
    if function is None:
        return b""
    if isinstance(function, functools.partial):
        bound = repr((function.args, sorted(function.keywords.items()))).encode()
        return _fingerprint(function.func) + bound
    target = getattr(function, "__func__", function)  # a bound method: its function
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType):
        return _code_bytes(code)
    kind = type(target)
    call = getattr(vars(kind).get("__call__"), "__code__", None)  # a callable object's method
    label = kind.__qualname__.encode()
    return label + b"\0" + _code_bytes(call) if isinstance(call, types.CodeType) else label


def _code_bytes(code: types.CodeType) -> bytes:
    constants = b"".join(
        _code_bytes(constant) if isinstance(constant, types.CodeType) else repr(constant).encode()
        for constant in code.co_consts
    )
    names = repr((code.co_names, code.co_varnames, code.co_freevars)).encode()
    return code.co_code + names + constants


def plan_backfill(
    *,
    name: str,
    source: Callable[[Page], Sequence[Any] | Awaitable[Sequence[Any]]],
    key: Callable[[Any], Any],
    handle: Handle,
    count: Callable[[], int | Awaitable[int]] | None,
    requires: str | None,
    environments: Sequence[str],
    batch: int,
    rate: float,
) -> Backfill:
    """Check a backfill's declaration and answer it; `Registry.backfill` declares its job."""
    for field, value in (("source", source), ("key", key), ("handle", handle)):
        if not callable(value):
            raise DeclarationInvalid(
                f"backfill {name}: {field} must be callable", detail={"field": field}
            )
    if count is not None and not callable(count):
        raise DeclarationInvalid(
            f"backfill {name}: count must be callable or None", detail={"field": "count"}
        )
    if requires is not None and (not isinstance(requires, str) or not requires.strip()):
        raise DeclarationInvalid(
            f"backfill {name}: requires must name an alembic revision, got {requires!r}",
            detail={"field": "requires"},
        )
    if isinstance(environments, str) or not all(
        isinstance(each, str) and each.strip() for each in environments
    ):
        raise DeclarationInvalid(
            f"backfill {name}: environments must be a list of names, got {environments!r}",
            detail={"field": "environments"},
        )
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < math.inf:
        raise DeclarationInvalid(
            f"backfill {name}: rate must be a positive, finite number of pages a second "
            f"(0.5 is one page every 2 s), got {rate!r}",
            detail={"field": "rate"},
        )
    try:
        size = parse_count(batch, field="batch", most=MOST_BATCH)
    except ValueError as invalid:
        raise DeclarationInvalid(f"backfill {name}: {invalid}", detail={"field": "batch"}) from None
    return Backfill(
        name=name,
        source=source,
        key=key,
        handle=handle,
        count=count,
        requires=requires,
        environments=tuple(environments),
        batch=size,
        rate=float(rate),
        checksum=checksum_of(name, (source, key, handle, count), requires, environments),
    )


BackfillState = Literal["pending", "failed", "running", "completed", "excluded"]
