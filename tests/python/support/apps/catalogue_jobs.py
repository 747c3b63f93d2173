"""Two deploys of one application for the job catalogue tests: `registry` as first deployed,
`changed` as the next release declares it (mail moved to another queue, a job added)."""

from __future__ import annotations

from durajobs import Registry
from durajobs.declare.retry import RetryPolicy
from support.factory import declare
from support.models import Invoice, invoice_key

registry = Registry()
changed = Registry()


@declare(registry, "mail", queue="emails", priority=5, retry=RetryPolicy.of(attempts=3))
def mail(ctx) -> None:
    return None


@declare(
    registry,
    "invoice",
    input=Invoice,
    idempotency_key=invoice_key,
    tenant=lambda invoice: invoice.org_id,
    queue="billing",
)
def invoice(ctx) -> None:
    return None


@declare(changed, "mail", queue="mail-v2", priority=5, retry=RetryPolicy.of(attempts=3))
def mail_moved(ctx) -> None:
    return None


@declare(changed, "digest", queue="emails")
def digest(ctx) -> None:
    return None
