"""A job the operator command tests inspect with `durajobs jobs show --app`: its declared retry
policy is what the retries ahead are computed from."""

from __future__ import annotations

from pydantic import BaseModel

from durajobs import Registry
from durajobs.declare.retry import RetryPolicy
from support.factory import declare

registry = Registry()


class Nothing(BaseModel):
    key: str = "k"


@declare(registry, "flaky", input=Nothing, retry=RetryPolicy.of(attempts=4, delay="2s"))
def flaky(ctx) -> None:
    raise RuntimeError("never runs in these tests")
