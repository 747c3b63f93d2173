"""A FastAPI handler that writes a business row and enqueues a job in one transaction.

The request's unit of work is a SQLAlchemy session from a dependency; the enqueue joins it with
`using=session`, so a handler that fails after enqueueing leaves neither the row nor the job.
(FastAPI runs sync dependencies in a worker thread whose context does not reach the endpoint,
so pass the session explicitly here rather than through durajobs.in_transaction.)
"""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy.orm import Session

from examples.sqlalchemy_app import Order, build


class NewOrder(BaseModel):
    customer: str


def create_app(database_url: str) -> FastAPI:
    engine, jobs = build(database_url)
    app = FastAPI()

    def unit_of_work() -> Iterator[Session]:
        with Session(engine) as session:
            try:
                yield session
                session.commit()
            except Exception:
                session.rollback()
                raise

    @app.post("/orders")
    def create_order(
        new: NewOrder, session: Annotated[Session, Depends(unit_of_work)]
    ) -> dict[str, object]:
        order = Order(customer=new.customer)
        session.add(order)
        session.flush()
        send_receipt = jobs.get("send-receipt")
        assert send_receipt is not None
        queued = send_receipt.enqueue({"order_id": order.id}, using=session)  # same transaction
        if new.customer == "refuse-after-enqueue":
            raise HTTPException(status_code=409, detail="refused after the enqueue")
        return {"order_id": order.id, "job_id": str(queued.id), "run_id": str(queued.run_id)}

    return app
