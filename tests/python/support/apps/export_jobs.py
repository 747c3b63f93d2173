"""An export the process-level tests run in real worker processes: it reads the table
export_items a keyset page at a time, notes each page it reads in export_reads (so a test can see
which pages a run read again after a crash), and writes its parts under $EXPORT_ROOT."""

from __future__ import annotations

import os
import time

import psycopg
from pydantic import BaseModel

from durajobs import LocalDirectory, Page, Registry

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)
COLUMNS = ["id", "name"]


class Request(BaseModel):
    export_id: str


def read_page(request: Request, page: Page) -> list[tuple[int, str]]:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute("insert into export_reads (after) values (%s)", [page.after])
        rows = connection.execute(
            "select id, name from export_items where id > %s order by id limit %s",
            [-1 if page.after is None else page.after, page.limit],
        ).fetchall()
    # a page takes a while, so a test can kill the worker between two of them
    time.sleep(float(os.environ.get("EXPORT_PAGE_SECONDS", "0")))
    return [(int(i), str(n)) for i, n in rows]


items_export = registry.export(
    name="items.export",
    input=Request,
    idempotency_key=lambda r: r.export_id,
    tenant="none",
    prefix=lambda r: f"exports/{r.export_id}",
    source=read_page,
    key=lambda row: row[0],
    columns=COLUMNS,
    row=lambda row: dict(zip(COLUMNS, row, strict=True)),
    sink=lambda: LocalDirectory(os.environ["EXPORT_ROOT"]),  # read at each write
    batch=2,
)
