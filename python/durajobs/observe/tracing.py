"""OpenTelemetry, when it is installed: an enqueue stamps the current trace context on the row
(its W3C `traceparent`), and the worker runs each attempt in a span that is that context's
child, so the request that enqueued and the job that ran later read as one trace. A command-line
enqueue takes the context from `--traceparent` or the `TRACEPARENT` environment variable.

Optional: without `opentelemetry-api` (pip install 'durajobs[otel]') both ends do nothing, and
with the API but no SDK configured the context is empty, so nothing is stamped either. Configure
the SDK before starting a worker: one configured later is noticed within five seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from durajobs._values.records import ClaimedJob
from durajobs.errors import ArgumentInvalid

# W3C Trace Context, version 00: version-trace_id-parent_id-flags in lowercase hex
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def _load() -> tuple[ModuleType, ModuleType] | None:
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return None
    return propagate, trace


_OTEL = _load()


_SDK_CHECK_SECONDS = 5.0
_sdk_seen: tuple[float, bool] = (-_SDK_CHECK_SECONDS, False)


def _sdk_configured(trace: ModuleType) -> bool:
    """Whether a real tracer provider is installed; asked every attempt, so the answer (an
    environment lookup inside OpenTelemetry) is kept for a few seconds."""
    global _sdk_seen
    now = time.monotonic()
    checked_at, answer = _sdk_seen
    if now - checked_at >= _SDK_CHECK_SECONDS:
        answer = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        _sdk_seen = (now, answer)
    return answer


def spans_active() -> bool:
    """Whether an attempt would get a real span (OpenTelemetry with an SDK configured)."""
    return _OTEL is not None and _sdk_configured(_OTEL[1])


def current_traceparent() -> str | None:
    """The active span's traceparent, or None (no OpenTelemetry, or no span)."""
    if _OTEL is None:
        return None
    propagate, _trace = _OTEL
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def stamped(requests: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """The bulk requests, each one without a `traceparent` key given the current span's; the
    same list when there is no span."""
    traceparent = current_traceparent()
    if traceparent is None:
        return requests
    return [
        request if "traceparent" in request else {**request, "traceparent": traceparent}
        for request in requests
    ]


def checked_traceparent(value: str, source: str) -> str:
    """`value` if it is a W3C traceparent a worker can continue; X_ARGUMENT_INVALID naming
    `source` otherwise (a malformed one would be dropped silently and the run start a new
    trace)."""
    match = _TRACEPARENT.fullmatch(value)
    if match is None or value.startswith("ff") or set(match[1]) == {"0"} or set(match[2]) == {"0"}:
        raise ArgumentInvalid(
            f"{source} is not a W3C traceparent: {value!r}",
            detail={"argument": source},
            hint="pass version-traceid-parentid-flags in lowercase hex, for example "
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01, or leave it out",
        )
    return value


@contextmanager
def job_span(claimed: ClaimedJob) -> Iterator[Any]:
    """Run an attempt inside a span whose parent is the enqueuer's (when one was stamped)."""
    if _OTEL is None:
        yield None
        return
    propagate, trace = _OTEL
    if not _sdk_configured(trace):
        # no SDK configured: every span would be a no-op, so skip the per-attempt cost
        yield None
        return
    parent = (
        propagate.extract({"traceparent": claimed.traceparent}) if claimed.traceparent else None
    )
    tracer = trace.get_tracer("durajobs")
    attributes = {
        "durajobs.job": claimed.name,
        "durajobs.job_id": str(claimed.id),
        "durajobs.queue": claimed.queue,
        "durajobs.attempt": claimed.attempt,
    }
    with tracer.start_as_current_span(
        f"job {claimed.name}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span
