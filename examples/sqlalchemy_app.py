"""A plain SQLAlchemy application: an order and its receipt job commit or roll back together.

Without this, two bugs hide in every app that enqueues next to its writes: a job that runs against
an order whose transaction rolled back, and a job lost when the process dies between the commit
and the enqueue. Here the job row is written on the session's own connection.
"""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy import Engine, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import durajobs


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(200))
    receipt_job: Mapped[str | None] = mapped_column(String(36), nullable=True)


class Receipt(BaseModel):
    order_id: int


def build(database_url: str) -> tuple[Engine, durajobs.Registry]:
    """The app's engine (psycopg 3 driver) and its jobs."""
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    Base.metadata.create_all(engine)
    jobs = durajobs.Registry(database_url)

    @jobs.job(
        name="send-receipt",
        input=Receipt,
        idempotency_key=lambda r: f"receipt:{r.order_id}",
        tenant="none",
    )
    async def send_receipt(ctx: durajobs.JobContext[Receipt]) -> None:
        await ctx.step.run("send", lambda: {"order": ctx.input.order_id})

    return engine, jobs


def place_order(session: Session, jobs: durajobs.Registry, customer: str) -> Order:
    """Write the order and enqueue its receipt in the caller's transaction (not committed here)."""
    order = Order(customer=customer)
    session.add(order)
    session.flush()  # the order's id, inside the transaction
    send_receipt = jobs.get("send-receipt")
    assert send_receipt is not None
    queued = send_receipt.enqueue({"order_id": order.id}, using=session)
    order.receipt_job = str(queued.id)  # the job's id is known before the commit
    return order
