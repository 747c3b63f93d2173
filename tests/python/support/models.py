"""The inputs the test jobs take, and the actor an `as_` enqueue acts for."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel


class Item(BaseModel):
    """The input most test jobs take: `key` is what they dedupe on."""

    key: str


class NotedItem(Item):
    """An Item with a free-text field, to see an input round-trip whole."""

    note: str = ""


class TimedItem(Item):
    """An Item that tells the body how long to take."""

    seconds: float = 0.0


class Numbered(BaseModel):
    """The input of jobs enqueued in bulk, one number each."""

    n: int


class Invoice(BaseModel):
    """The input of a tenanted job: the tenant comes from `org_id`."""

    invoice_id: int
    org_id: str
    note: str = ""


def invoice_key(invoice: Invoice) -> str:
    return f"invoice:{invoice.invoice_id}"


@dataclass(frozen=True)
class Actor:
    """Whom `job.as_(actor, ...)` enqueues for: the tenant and the enqueuer it stamps."""

    id: str
    org_id: str | None
