"""Declare test jobs without respelling what every declaration needs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import durajobs
from support.models import Invoice, Item, invoice_key


def by_key(item: Any) -> Any:
    """The idempotency key of an Item: its `key`."""
    return item.key


def noop(ctx: Any) -> None:
    """A handler with nothing to do."""
    return None


def declare(
    registry: durajobs.Registry,
    name: str,
    *,
    input: type[BaseModel] = Item,
    **overrides: Any,
) -> Any:
    """Answer `registry.job(...)` for `name`, taking `input` (an Item unless given), keyed by the
    input's `key` and tenant 'none', unless `overrides` say otherwise: decorate a handler with it.
    """
    overrides.setdefault("idempotency_key", by_key)
    overrides.setdefault("tenant", "none")
    return registry.job(name=name, input=input, **overrides)


def declare_invoice(
    registry: durajobs.Registry,
    name: str = "invoice.send",
    calls: list[Any] | None = None,
    **options: Any,
) -> Any:
    """Declare an Invoice job whose handler records any call (enqueue must never run it), keyed
    by invoice and tenanted by its org unless `options` say otherwise."""
    options.setdefault("idempotency_key", invoice_key)
    options.setdefault("tenant", lambda invoice: invoice.org_id)

    @registry.job(name=name, input=Invoice, **options)
    def handler(ctx):
        if calls is not None:
            calls.append(ctx)

    return handler
