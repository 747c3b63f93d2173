"""Fan-out and fan-in: a cron task that must reach every row of a table, and add up the answers.

A task's enqueue function answers [(job, input)] synchronously and does no I/O, so it cannot
list rows. It enqueues ONE fan-out job keyed by the occurrence. That job lists the rows in a
step, enqueues one child per row with `ctx.step.enqueue` (the child and the step that records
it land together, so a crash half-way replays the children already made and makes only the
rest), then parks with `ctx.step.wait_for` until every child has settled, holding no process
and no worker slot. The last child to finish wakes it, in its own settling statement, and the
parent adds up their results. A child that fails retries alone; one that is dead for good
reaches the parent as an error in the list (`return_exceptions=True`), counted, not fatal.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from pydantic import BaseModel

import durajobs


class Occurrence(BaseModel):
    occurrence: str


class Invoice(BaseModel):
    customer_id: int
    occurrence: str


class Billed(BaseModel):
    """What one night's run answers: how many invoices went out, their total, what failed."""

    invoices: int
    cents: int
    failed: list[int]


def build(database_url: str) -> durajobs.Registry:
    """The jobs and the task of the example (the customers table is created if missing)."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table if not exists customers (id int primary key)")
    jobs = durajobs.Registry(database_url)

    @jobs.job(
        name="send-invoice",
        input=Invoice,
        idempotency_key=lambda i: f"send-invoice:{i.customer_id}:{i.occurrence}",
        tenant="none",
        retry=durajobs.RetryPolicy.of(attempts=3, delay="50ms"),
    )
    async def send_invoice(ctx: durajobs.JobContext[Invoice]) -> dict[str, int]:
        # the mail itself would go here, in a step: its result is stored before the ack
        return await ctx.step.run(
            "send", lambda: {"customer": ctx.input.customer_id, "cents": 1000}
        )

    def list_customers() -> list[int]:
        with psycopg.connect(database_url) as connection:
            rows = connection.execute("select id from customers order by id").fetchall()
        return [row[0] for row in rows]

    @jobs.job(
        name="invoice-fan-out",
        input=Occurrence,
        idempotency_key=lambda o: f"invoice-fan-out:{o.occurrence}",
        tenant="none",
        retry=durajobs.RetryPolicy.of(attempts=5, delay="50ms"),
        output=Billed,
    )
    async def invoice_fan_out(ctx: durajobs.JobContext[Occurrence]) -> Billed:
        customers = await ctx.step.run("list", list_customers)
        children = [
            await ctx.step.enqueue(
                send_invoice,
                {"customer_id": customer_id, "occurrence": ctx.input.occurrence},
                name=f"invoice:{customer_id}",
            )
            for customer_id in customers
        ]
        if not children:
            return Billed(invoices=0, cents=0, failed=[])
        outcomes: list[Any] = await ctx.step.wait_for(*children, return_exceptions=True)
        sent = [o for o in outcomes if not isinstance(o, BaseException)]
        failed = [
            c for c, o in zip(customers, outcomes, strict=True) if isinstance(o, BaseException)
        ]
        return Billed(invoices=len(sent), cents=sum(o["cents"] for o in sent), failed=failed)

    @jobs.task(name="nightly-invoices", cron="0 2 * * *", tz="Europe/Paris")
    def nightly_invoices(
        occurrence: datetime,
    ) -> list[tuple[durajobs.Job[Occurrence], dict[str, str]]]:
        return [(invoice_fan_out, {"occurrence": occurrence.isoformat()})]

    return jobs
