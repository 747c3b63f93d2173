"""Exports: a paged read written out as parts and a manifest, by a job built on durable steps.

`Registry.export(...)` declares a job whose body reads the application's rows a keyset page at a
time (`source`, continued after the `key` of the last row), encodes each page as one part
(`<prefix>/part-00000.csv`, or `.ndjson`) and hands it to a sink, then writes
`<prefix>/manifest.json`, which counts the parts. Each page is one step whose stored output is the
cursor and two counters, never the rows: a worker that dies resumes at the page it stopped on,
holding no more than one page in memory, and a page that runs again rewrites the same part.

The rules, each with its reason:
- one part a page, never one object an export: an object store's put takes the whole object,
  so a single-object export holds the whole dataset in memory;
- `max_part_bytes` bounds that memory: a page encoded past it is refused, naming the batch;
- every line ends in a newline and only part 0 has the CSV header, so the parts concatenate into
  one valid file;
- a key `row()` answers that `columns` does not name is refused: the encoders would drop it in
  silence, and `row=lambda r: dict(r)` would take every column a later migration adds;
- a CSV string cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a
  leading `'`: spreadsheets evaluate such cells as formulas. Numbers stay numbers;
- the sink is a factory called for each write, never at declaration, so an application may
  build its storage client after its jobs are declared;
- `rate` (pages a second) has no default, and its pause is spent inside the page's step, so a
  resumed run pays none for the pages it replays.
- `source` and the sink's `put` may block (a plain function runs in a thread) or be async;
  `row` runs on the event loop, once a row, and must be a quick function of the row alone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from durajobs._values.counts import parse_count
from durajobs.declare.factory import Context, call_off_loop
from durajobs.errors import (
    ArgumentInvalid,
    DeclarationInvalid,
    ExportPartTooLarge,
    ExportRowInvalid,
)

I = TypeVar("I", bound=BaseModel)  # noqa: E741 (the input model, as in declare.registry)


ExportFormat = Literal["csv", "ndjson"]
FORMATS: tuple[ExportFormat, ...] = ("csv", "ndjson")
DEFAULT_EXPORT_BATCH = 1000
MOST_BATCH = 100_000
DEFAULT_MAX_PART_BYTES = 64 * 1024 * 1024
PART_MODE = 0o644  # what LocalDirectory gives a part, as a file written with open() would be
# the leading characters a spreadsheet reads as the start of a formula
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
# what a cell may hold: row() formats anything else (a date with its zone, money with its
# currency) where the application knows what it means
Cell = str | int | float | Decimal | bool | None


@dataclass(frozen=True, slots=True)
class Page:
    """What `source` is asked for: at most `limit` rows, in key order, after the row whose key
    is `after` (None: from the first)."""

    after: Any
    limit: int


class ExportSink(Protocol):
    """Where parts go: a local directory (`LocalDirectory`) or any object with this method, sync
    or async, for example an S3 client's `put_object` wrapped in a function of a key and bytes."""

    def put(self, key: str, data: bytes) -> Awaitable[None] | None: ...


class LocalDirectory:
    """A sink writing each key as a file under `root`; a part is written whole or not at all (a
    temporary file renamed into place), so a reader never sees half of one."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def put(self, key: str, data: bytes) -> None:
        root = self.root.resolve()
        target = (self.root / key).resolve()
        if target == root or not target.is_relative_to(root):
            raise ArgumentInvalid(
                f"export key {key!r} leaves the sink's directory", detail={"key": key}
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            # mkstemp makes the file readable by its owner alone; a part is for whoever reads
            # the directory
            os.fchmod(handle, PART_MODE)
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def part_key(prefix: str, index: int, format: ExportFormat) -> str:
    """The key of part `index`: the page's index, so a page that runs again rewrites its part."""
    return f"{prefix}/part-{index:05d}.{format}"


def manifest_key(prefix: str) -> str:
    return f"{prefix}/manifest.json"


async def _pause(seconds: float) -> None:
    """A page's pause under `rate` (its own function, so a test can count the pauses)."""
    await asyncio.sleep(seconds)


@dataclass(frozen=True)
class Export(Generic[I]):
    """One declared export: what its job's body reads, encodes and writes."""

    name: str
    prefix: Callable[[I], str]
    source: Callable[[I, Page], Sequence[Any] | Awaitable[Sequence[Any]]]
    key: Callable[[Any], Any]
    columns: tuple[str, ...]
    row: Callable[[Any], dict[str, Any]]
    sink: Callable[[], ExportSink]
    format: ExportFormat
    batch: int
    max_part_bytes: int
    rate: float | None

    async def run(self, ctx: Context[I]) -> None:
        """The job's body: one step a page, then the manifest."""
        model = ctx.input
        prefix = self.prefix(model)
        after: Any = None
        parts = rows = index = 0
        while True:
            page = functools.partial(self._page, model, prefix, index, after)
            done = await ctx.step.run(f"page-{index:05d}", page)
            after, rows = done["cursor"], rows + done["rows"]
            parts += 1 if done["bytes"] else 0
            # as the page found it, not by today's batch: a deploy that changed the batch must
            # not take a replayed full page for the last one and end the export short
            if done["last"]:
                break
            index += 1
        manifest = functools.partial(self._manifest, prefix, parts, rows)
        await ctx.step.run("manifest", manifest)

    async def _page(self, model: I, prefix: str, index: int, after: Any) -> dict[str, Any]:
        """Read, encode and write page `index`; answer its cursor and counts (the step's
        output: never the rows, which a run would otherwise keep until it ends)."""
        if self.rate is not None:
            await _pause(1 / self.rate)  # here, inside the step: a replayed page pays none
        fetched = list(await call_off_loop(self.source, model, Page(after=after, limit=self.batch)))
        if len(fetched) > self.batch:
            raise ArgumentInvalid(
                f"export {self.name}: source answered {len(fetched)} rows for a page of "
                f"{self.batch}",
                detail={"export": self.name, "field": "source"},
            )
        last = len(fetched) < self.batch
        data = self._encode(fetched, header=index == 0)
        if not data:
            # nothing to write (the pages before ended on a full batch and this one found
            # nothing, or an NDJSON export of no rows): no part
            return {"cursor": after, "rows": 0, "bytes": 0, "last": last}
        if len(data) > self.max_part_bytes:
            raise ExportPartTooLarge(
                f"export {self.name}: page {index} encodes to {len(data)} bytes, past "
                f"max_part_bytes {self.max_part_bytes}; lower batch (now {self.batch})",
                detail={"export": self.name, "batch": self.batch, "bytes": len(data)},
            )
        sink = self.sink()  # asked on each write, never at declaration
        await call_off_loop(sink.put, part_key(prefix, index, self.format), data)
        cursor = self.key(fetched[-1]) if fetched else after
        return {"cursor": cursor, "rows": len(fetched), "bytes": len(data), "last": last}

    async def _manifest(self, prefix: str, parts: int, rows: int) -> dict[str, int]:
        document = {
            "columns": list(self.columns),
            "format": self.format,
            "parts": parts,
            "rows": rows,
        }
        data = (json.dumps(document, sort_keys=True) + "\n").encode()
        await call_off_loop(self.sink().put, manifest_key(prefix), data)
        return {"parts": parts, "rows": rows}

    def _cells(self, source_row: Any) -> list[Cell]:
        mapped = self.row(source_row)
        if not isinstance(mapped, dict):
            raise ExportRowInvalid(
                f"export {self.name}: row() must answer a dict, got {type(mapped).__name__}",
                detail={"export": self.name},
            )
        extra = sorted(set(mapped) - set(self.columns))
        if extra:
            raise ExportRowInvalid(
                f"export {self.name}: row() answered keys that columns does not name: {extra}",
                detail={"export": self.name, "keys": extra},
            )
        cells = [mapped.get(column) for column in self.columns]
        for column, cell in zip(self.columns, cells, strict=True):
            if not isinstance(cell, Cell) or (isinstance(cell, float) and not math.isfinite(cell)):
                raise ExportRowInvalid(
                    f"export {self.name}: column {column} holds {cell!r:.40}; format it in row() "
                    "as text, a finite number, a boolean or None",
                    detail={"export": self.name, "column": column},
                )
        return cells

    def _encode(self, rows: list[Any], *, header: bool) -> bytes:
        if self.format == "ndjson":
            lines = [
                json.dumps(
                    dict(zip(self.columns, self._json_cells(row), strict=True)),
                    ensure_ascii=False,
                    separators=(",", ":"),
                )
                + "\n"
                for row in rows
            ]
            return "".join(lines).encode()
        lines = [_csv_line(self.columns)] if header else []
        lines += [_csv_line([_csv_cell(cell) for cell in self._cells(row)]) for row in rows]
        return "".join(lines).encode()

    def _json_cells(self, row: Any) -> list[Cell]:
        # JSON has no decimal: a Decimal is written as its exact text
        return [str(cell) if isinstance(cell, Decimal) else cell for cell in self._cells(row)]


def _csv_line(fields: Sequence[str]) -> str:
    """One CSV record (RFC 4180) ending in a newline. Not the csv module's writer: with a
    newline as its line terminator it leaves a field holding a bare carriage return unquoted,
    and a reader then splits the record there."""
    return ",".join(_csv_field(field) for field in fields) + "\n"


def _csv_field(field: str) -> str:
    if any(special in field for special in (",", '"', "\n", "\r")):
        return '"' + field.replace('"', '""') + '"'
    return field


def _csv_cell(cell: Cell) -> str:
    if cell is None:
        return ""
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, str):
        # a spreadsheet would evaluate it: a user-named record must not become a formula
        return "'" + cell if cell.startswith(FORMULA_LEADS) else cell
    return str(cell)


def plan_export(
    *,
    name: str,
    prefix: Callable[[I], str],
    source: Callable[[I, Page], Sequence[Any] | Awaitable[Sequence[Any]]],
    key: Callable[[Any], Any],
    columns: Sequence[str],
    row: Callable[[Any], dict[str, Any]],
    sink: Callable[[], ExportSink],
    format: ExportFormat,
    batch: int,
    max_part_bytes: int,
    rate: float | None,
) -> Export[I]:
    """Check an export's declaration and answer it; `Registry.export` declares its job."""
    names = tuple(columns) if not isinstance(columns, str) else ()
    if not names or len(set(names)) != len(names) or not all(isinstance(c, str) for c in names):
        raise DeclarationInvalid(
            f"export {name}: columns must name each column once, in order",
            detail={"field": "columns"},
        )
    if format not in FORMATS:
        raise DeclarationInvalid(
            f"export {name}: format must be one of {', '.join(FORMATS)}, got {format!r}",
            detail={"field": "format"},
        )
    for field, value in (
        ("prefix", prefix),
        ("source", source),
        ("key", key),
        ("row", row),
        ("sink", sink),
    ):
        if not callable(value):
            raise DeclarationInvalid(
                f"export {name}: {field} must be callable", detail={"field": field}
            )
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < float("inf")
    ):
        raise DeclarationInvalid(
            f"export {name}: rate must be a positive number of pages a second, or None",
            detail={"field": "rate"},
        )
    return Export(
        name=name,
        prefix=prefix,
        source=source,
        key=key,
        columns=names,
        row=row,
        sink=sink,
        format=format,
        batch=_count(name, "batch", batch, MOST_BATCH),
        max_part_bytes=_count(name, "max_part_bytes", max_part_bytes, None),
        rate=None if rate is None else float(rate),
    )


def _count(name: str, field: str, value: int, most: int | None) -> int:
    try:
        return parse_count(value, field=field, most=most)
    except ValueError as invalid:
        raise DeclarationInvalid(f"export {name}: {invalid}", detail={"field": field}) from None
