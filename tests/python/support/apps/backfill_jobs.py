"""Backfills the process-level and CLI tests run: `items.fill` sets `done` on every row of
backfill_items a keyset page at a time, noting each page it reads in backfill_reads (so a test
can see which pages a run read again after a crash); `items.gated` requires an application
migration and runs in production only; `items.counted` declares a count."""

from __future__ import annotations

import os
import time

import psycopg

from durajobs import Page, Registry

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)


def read_page(page: Page) -> list[tuple[int]]:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute("insert into backfill_reads (after) values (%s)", [page.after])
        rows = connection.execute(
            "select id from backfill_items where id > %s order by id limit %s",
            [-1 if page.after is None else page.after, page.limit],
        ).fetchall()
    # a page takes a while, so a test can kill the worker between two of them
    time.sleep(float(os.environ.get("BACKFILL_PAGE_SECONDS", "0")))
    return [(int(row[0]),) for row in rows]


def mark_done(rows: list[tuple[int]], _signal: object) -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute(
            "update backfill_items set done = done + 1 where id = any(%s)", [[r[0] for r in rows]]
        )


def rows_left() -> int:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        row = connection.execute("select count(*) from backfill_items where done = 0").fetchone()
    assert row is not None
    return int(row[0])


items_fill = registry.backfill(
    name="items.fill", source=read_page, key=lambda row: row[0], handle=mark_done, batch=2, rate=50
)
items_gated = registry.backfill(
    name="items.gated",
    source=read_page,
    key=lambda row: row[0],
    handle=mark_done,
    requires="app_0002",
    environments=["production"],
)
items_counted = registry.backfill(
    name="items.counted",
    source=read_page,
    key=lambda row: row[0],
    handle=mark_done,
    count=rows_left,
    batch=100,
    rate=50,
)
