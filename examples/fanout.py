"""The fan-out pattern: a cron task that must reach every row of a table.

A task's enqueue function answers [(job, input)] synchronously and does no I/O, so it cannot
list rows. It enqueues ONE fan-out job keyed by the occurrence; that job lists the rows in a
step, then enqueues one child per row, each in a step of its own. A crash half-way resumes: the
listed rows and the children already enqueued replay from storage, and each child is keyed
'<name>:<row id>:<occurrence>', so a replay can never make a second child for a row. A child
that fails retries alone.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from pydantic import BaseModel

import durajobs


class Occurrence(BaseModel):
    occurrence: str


class Invoice(BaseModel):
    customer_id: int
    occurrence: str


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
    async def send_invoice(ctx: durajobs.JobContext[Invoice]) -> None:
        await ctx.step.run("send", lambda: {"customer": ctx.input.customer_id})

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
    )
    async def invoice_fan_out(ctx: durajobs.JobContext[Occurrence]) -> int:
        customers = await ctx.step.run("list", list_customers)
        for customer_id in customers:
            await ctx.step.run(
                f"enqueue:{customer_id}",
                lambda customer_id=customer_id: str(
                    send_invoice.enqueue(
                        {"customer_id": customer_id, "occurrence": ctx.input.occurrence}
                    ).id
                ),
            )
        return len(customers)

    @jobs.task(name="nightly-invoices", cron="0 2 * * *", tz="Europe/Paris")
    def nightly_invoices(
        occurrence: datetime,
    ) -> list[tuple[durajobs.Job[Occurrence], dict[str, str]]]:
        return [(invoice_fan_out, {"occurrence": occurrence.isoformat()})]

    return jobs
