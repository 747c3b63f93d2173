"""Exports (items 189-196, R77, R78, R80-R82): a keyset-paged read of a real table, written by a
worker as one part a page and a manifest, each page a durable step."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

import durajobs
from durajobs.declare import export as export_module
from durajobs.declare.retry import RetryPolicy
from durajobs.errors import DeclarationInvalid
from durajobs.runtime.worker import Worker
from support.rows import fetch_all
from support.running import run_until

COLUMNS = ["id", "name", "amount"]


class Request(BaseModel):
    export_id: str


def _fill(database_url: str, rows: list[tuple[int, str, int]]) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "create table if not exists export_items (id int primary key, name text, amount int)"
        )
        connection.execute("truncate export_items")
        with connection.cursor() as cursor:
            cursor.executemany("insert into export_items values (%s, %s, %s)", rows)


class Source:
    """Reads export_items a keyset page at a time, noting which page (its `after`) it was asked
    for; `fail_after` makes the call for that cursor raise once."""

    def __init__(self, database_url: str, fail_after: Any = "never") -> None:
        self.database_url = database_url
        self.asked: list[Any] = []
        self.fail_after = fail_after

    def __call__(self, request: Request, page: durajobs.Page) -> list[tuple[int, str, int]]:
        self.asked.append(page.after)
        if page.after == self.fail_after:
            self.fail_after = "never"
            raise RuntimeError("the database went away mid-export")
        with psycopg.connect(self.database_url) as connection:
            rows = connection.execute(
                "select id, name, amount from export_items where id > %s order by id limit %s",
                [-1 if page.after is None else page.after, page.limit],
            ).fetchall()
        return [(int(i), str(n), int(a)) for i, n, a in rows]


def _declare(
    database_url: str,
    root: Path,
    *,
    source: Source | None = None,
    sinks: list[int] | None = None,
    **overrides: Any,
) -> tuple[durajobs.Registry, durajobs.Job[Request]]:
    registry = durajobs.Registry(database_url=database_url)

    def sink() -> durajobs.LocalDirectory:
        if sinks is not None:
            sinks.append(1)
        return durajobs.LocalDirectory(root)

    declaration: dict[str, Any] = {
        "name": "items.export",
        "input": Request,
        "idempotency_key": lambda r: r.export_id,
        "tenant": "none",
        "prefix": lambda r: f"exports/{r.export_id}",
        "source": source or Source(database_url),
        "key": lambda row: row[0],
        "columns": COLUMNS,
        "row": lambda row: dict(zip(COLUMNS, row, strict=True)),
        "sink": sink,
        "batch": 3,
        "retry": RetryPolicy.of(attempts=3, delay=timedelta(milliseconds=10), jitter=False),
    }
    declaration.update(overrides)
    job = registry.export(**declaration)
    return registry, job


def _run(database_url: str, registry: durajobs.Registry, export_id: str = "e1") -> tuple[str, Any]:
    job = registry.get("items.export")
    assert job is not None
    enqueued = job.enqueue({"export_id": export_id})
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )

    def ended() -> bool:
        rows = fetch_all(database_url, "select state from jobs.jobs where id = %s", [enqueued.id])
        return rows[0][0] in ("done", "dead", "failed")

    asyncio.run(run_until(worker, ended))
    ((state, error),) = fetch_all(
        database_url, "select state, last_error from jobs.jobs where id = %s", [enqueued.id]
    )
    return state, error


def _parts(root: Path, export_id: str = "e1") -> list[Path]:
    return sorted((root / "exports" / export_id).glob("part-*"))


def _manifest(root: Path, export_id: str = "e1") -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (root / "exports" / export_id / "manifest.json").read_text()
    )
    return loaded


ROWS = [(i, f"item {i}", i * 10) for i in range(1, 8)]


def test_one_part_a_page_and_a_manifest_that_counts_them(database_url, tmp_path):
    """Items 189, 191, R80: 7 rows in pages of 3 are 3 parts; each line ends in a newline, the
    header is in part 0 alone, and the parts concatenate into one CSV of every row."""
    _fill(database_url, ROWS)
    registry, _job = _declare(database_url, tmp_path)
    assert _run(database_url, registry) == ("done", None)
    parts = _parts(tmp_path)
    assert [p.name for p in parts] == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    assert _manifest(tmp_path) == {"columns": COLUMNS, "format": "csv", "parts": 3, "rows": 7}
    texts = [p.read_text() for p in parts]
    assert all(text.endswith("\n") for text in texts)
    assert texts[0].startswith("id,name,amount\n")
    assert not any(text.startswith("id,") for text in texts[1:])
    whole = list(csv.reader(io.StringIO("".join(texts))))
    assert whole == [COLUMNS] + [[str(i), n, str(a)] for i, n, a in ROWS]


def test_a_last_page_that_finds_nothing_writes_no_part(database_url, tmp_path):
    _fill(database_url, ROWS[:6])
    registry, _job = _declare(database_url, tmp_path)
    assert _run(database_url, registry) == ("done", None)
    assert len(_parts(tmp_path)) == 2
    assert _manifest(tmp_path)["parts"] == 2


def test_an_empty_source_is_one_part_with_the_header(database_url, tmp_path):
    _fill(database_url, [])
    registry, _job = _declare(database_url, tmp_path)
    assert _run(database_url, registry) == ("done", None)
    assert [p.read_text() for p in _parts(tmp_path)] == ["id,name,amount\n"]
    assert _manifest(tmp_path) == {"columns": COLUMNS, "format": "csv", "parts": 1, "rows": 0}


def test_formula_cells_are_neutralised_and_numbers_left_alone(database_url, tmp_path):
    """Item 194, R82: strings a spreadsheet would evaluate get a leading quote; -5 stays -5."""
    names = ["=1+1", "+cmd", "-2+3", "@SUM(A1)", "\tlead", "\rlead", "plain"]
    _fill(database_url, [(i, name, -5) for i, name in enumerate(names, 1)])
    registry, _job = _declare(database_url, tmp_path, batch=100)
    assert _run(database_url, registry) == ("done", None)
    (part,) = _parts(tmp_path)
    # bytes decoded as they are: read_text() would turn the carriage return into a newline
    read = list(csv.reader(io.StringIO(part.read_bytes().decode(), newline="")))[1:]
    assert [row[1] for row in read] == [
        "'=1+1",
        "'+cmd",
        "'-2+3",
        "'@SUM(A1)",
        "'\tlead",
        "'\rlead",
        "plain",
    ]
    assert {row[2] for row in read} == {"-5"}


def test_a_cell_with_a_comma_quote_or_line_break_reads_back_as_written(database_url, tmp_path):
    names = ["a, b", 'say "hi"', "two\nlines", "bare\rreturn", "crlf\r\nend"]
    _fill(database_url, [(i, name, 1) for i, name in enumerate(names, 1)])
    registry, _job = _declare(database_url, tmp_path, batch=100)
    assert _run(database_url, registry) == ("done", None)
    (part,) = _parts(tmp_path)
    read = list(csv.reader(io.StringIO(part.read_bytes().decode(), newline="")))[1:]
    assert [row[1] for row in read] == names


def test_an_empty_ndjson_export_writes_no_part_and_a_manifest_of_none(database_url, tmp_path):
    _fill(database_url, [])
    registry, _job = _declare(database_url, tmp_path, format="ndjson")
    assert _run(database_url, registry) == ("done", None)
    assert _parts(tmp_path) == []
    assert _manifest(tmp_path) == {"columns": COLUMNS, "format": "ndjson", "parts": 0, "rows": 0}


def test_a_batch_changed_by_a_deploy_mid_export_does_not_end_it_short(database_url, tmp_path):
    """A page stores whether it was the last as it found it: a retry under a larger batch
    replays the full pages before and goes on, rather than taking them for the end."""
    _fill(database_url, ROWS)
    source = Source(database_url, fail_after=6)
    # a retry half a second away: the first worker stops before it, the redeployed one runs it
    slow_retry = RetryPolicy.of(attempts=3, delay=timedelta(milliseconds=500), jitter=False)
    registry, _job = _declare(database_url, tmp_path, source=source, retry=slow_retry)
    job = registry.get("items.export")
    assert job is not None
    enqueued = job.enqueue({"export_id": "e1"})
    worker = Worker(
        registry,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )
    # the first attempt: pages 0 and 1 stored, page 2 failed and waits for its retry
    asyncio.run(run_until(worker, lambda: source.asked.count(6) == 1 and len(source.asked) == 3))
    resumed = Source(database_url)
    redeployed, _job = _declare(database_url, tmp_path, source=resumed, batch=5)
    worker = Worker(
        redeployed,
        database_url,
        listen=False,
        poll_floor=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=20),
    )

    def ended() -> bool:
        rows = fetch_all(database_url, "select state from jobs.jobs where id = %s", [enqueued.id])
        return rows[0][0] in ("done", "dead", "failed")

    asyncio.run(run_until(worker, ended))
    assert resumed.asked == [6]  # pages 0 and 1 replayed from their steps, page 2 read anew
    assert _manifest(tmp_path)["rows"] == 7
    whole = "".join(p.read_text() for p in _parts(tmp_path))
    assert len(list(csv.reader(io.StringIO(whole)))) == 8  # the header and every row


def test_a_float_that_is_not_finite_is_refused(database_url, tmp_path):
    _fill(database_url, ROWS[:1])
    registry, _job = _declare(
        database_url,
        tmp_path,
        format="ndjson",
        row=lambda row: {"id": row[0], "name": row[1], "amount": float("nan")},
    )
    state, error = _run(database_url, registry)
    assert state == "dead"
    assert error.startswith("X_EXPORT_ROW_INVALID")


def test_ndjson_writes_one_object_a_line_in_column_order(database_url, tmp_path):
    _fill(database_url, ROWS[:4])
    registry, _job = _declare(database_url, tmp_path, format="ndjson")
    assert _run(database_url, registry) == ("done", None)
    parts = _parts(tmp_path)
    assert [p.name for p in parts] == ["part-00000.ndjson", "part-00001.ndjson"]
    lines = "".join(p.read_text() for p in parts).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": i, "name": n, "amount": a} for i, n, a in ROWS[:4]
    ]
    assert list(json.loads(lines[0])) == COLUMNS


def test_a_key_the_columns_do_not_name_is_refused(database_url, tmp_path):
    """Item 193, R81: row() copying its record picks up a new column: refused, not dropped."""
    _fill(database_url, ROWS[:2])
    registry, _job = _declare(
        database_url,
        tmp_path,
        row=lambda row: {"id": row[0], "name": row[1], "amount": row[2], "secret": "x"},
    )
    state, error = _run(database_url, registry)
    assert state == "dead"
    assert error.startswith("X_EXPORT_ROW_INVALID")
    assert "secret" in error
    assert _parts(tmp_path) == []


def test_a_value_no_cell_holds_is_refused(database_url, tmp_path):
    _fill(database_url, ROWS[:1])
    registry, _job = _declare(
        database_url, tmp_path, row=lambda row: {"id": row[0], "name": object(), "amount": 1}
    )
    state, error = _run(database_url, registry)
    assert state == "dead"
    assert error.startswith("X_EXPORT_ROW_INVALID")


def test_a_page_past_max_part_bytes_is_refused_naming_the_batch(database_url, tmp_path):
    """Item 192: the bound is on one page in memory; the error says which batch to lower."""
    _fill(database_url, ROWS)
    registry, _job = _declare(database_url, tmp_path, max_part_bytes=20)
    state, error = _run(database_url, registry)
    assert state == "dead"
    assert error.startswith("X_EXPORT_PART_TOO_LARGE")
    assert "batch (now 3)" in error


def test_the_sink_is_asked_for_on_each_write_never_at_declaration(database_url, tmp_path):
    """Item 196: an application may build its storage client after its jobs are declared."""
    _fill(database_url, ROWS)
    sinks: list[int] = []
    registry, _job = _declare(database_url, tmp_path, sinks=sinks)
    assert sinks == []
    assert _run(database_url, registry) == ("done", None)
    assert len(sinks) == 4  # three parts and the manifest


def test_a_step_keeps_the_cursor_and_two_counts_never_the_rows(database_url, tmp_path):
    """R77: a completed step's output lives as long as the run; rows there would keep every
    exported row until the export ends."""
    _fill(database_url, ROWS)
    registry, _job = _declare(database_url, tmp_path)
    assert _run(database_url, registry) == ("done", None)
    outputs = fetch_all(
        database_url,
        "select name, output from jobs.steps where left(name, 5) = 'page-' order by name",
    )
    sizes = [p.stat().st_size for p in _parts(tmp_path)]
    assert [(name, output) for name, output in outputs] == [
        ("page-00000", {"cursor": 3, "rows": 3, "bytes": sizes[0], "last": False}),
        ("page-00001", {"cursor": 6, "rows": 3, "bytes": sizes[1], "last": False}),
        ("page-00002", {"cursor": 7, "rows": 1, "bytes": sizes[2], "last": True}),
    ]


def test_a_retry_resumes_at_its_page_with_the_same_bytes_and_no_replayed_pause(
    database_url, tmp_path, monkeypatch
):
    """Item 190, R78: an attempt that fails on page 2 is retried; the retry reads neither page
    0 nor 1 again and pays no pause for them, and the parts are byte for byte those of an
    export that never failed."""
    _fill(database_url, ROWS)
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(export_module, "_pause", pause)
    clean_root, failing_root = tmp_path / "clean", tmp_path / "failing"
    registry, _job = _declare(database_url, clean_root, rate=1000)
    assert _run(database_url, registry) == ("done", None)
    pauses.clear()

    source = Source(database_url, fail_after=6)
    registry, _job = _declare(database_url, failing_root, source=source, rate=1000)
    state, error = _run(database_url, registry)
    assert state == "done"
    assert error == "RuntimeError: the database went away mid-export"  # the first attempt's
    assert source.asked == [None, 3, 6, 6]  # page 2 twice, pages 0 and 1 once
    assert len(pauses) == 4  # pages 0, 1, 2, and 2 again: none for the replayed pages
    clean = [p.read_bytes() for p in _parts(clean_root)]
    assert [p.read_bytes() for p in _parts(failing_root)] == clean
    assert len(clean) == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("columns", []),
        ("columns", ["id", "id"]),
        ("format", "xlsx"),
        ("batch", 0),
        ("max_part_bytes", -1),
        ("rate", 0),
        ("source", "not callable"),
    ],
)
def test_a_declaration_that_cannot_hold_is_refused(database_url, tmp_path, field, value):
    with pytest.raises(DeclarationInvalid) as refused:
        _declare(database_url, tmp_path, **{field: value})
    assert refused.value.detail["field"] == field


@pytest.mark.parametrize("key", ["../escape.csv", "x/..", "/etc/escape.csv"])
def test_the_local_directory_refuses_a_key_outside_it(tmp_path, key):
    with pytest.raises(durajobs.ArgumentInvalid):
        durajobs.LocalDirectory(tmp_path / "root").put(key, b"x")
    assert list(tmp_path.rglob("*")) == []


def test_the_local_directory_writes_a_part_readable_by_others(tmp_path):
    durajobs.LocalDirectory(tmp_path).put("a/part-00000.csv", b"id\n")
    written = tmp_path / "a" / "part-00000.csv"
    assert written.read_bytes() == b"id\n"
    assert written.stat().st_mode & 0o777 == 0o644
