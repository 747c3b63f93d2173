"""What a supervisor asks a worker process, on the port its metrics are served on:

- `/healthz`: 200 while the process serves at all (a liveness probe: restart it when this fails);
- `/readyz`: 200 while it does its work, 503 with the reason otherwise (a readiness probe):
  it is not draining, the database answered one of its calls within the window, its claim loop
  ran a pass within the window (or every slot is busy), and its LISTEN session, when it has
  one, has not been down for the whole window.

Both answer a JSON document: {"ready": bool, "checks": {name: "ok" | why not}}.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

OK = "ok"


@dataclass(frozen=True, slots=True)
class Readiness:
    """Each check's verdict; ready when every one is 'ok'."""

    checks: dict[str, str]

    @property
    def ready(self) -> bool:
        return all(verdict == OK for verdict in self.checks.values())

    def document(self) -> dict[str, Any]:
        return {"ready": self.ready, "checks": self.checks}


def judge(
    *,
    now: float,
    within: float,
    accepting: bool,
    last_answer: float | None,
    last_pass: float | None,
    at_capacity: bool,
    listening: bool,
    wake_down_since: float | None,
) -> Readiness:
    """The verdicts, from the worker's state read on one clock (`now`, monotonic seconds)."""

    def recent(at: float | None, what: str) -> str:
        if at is None:
            return f"no {what} yet"
        age = now - at
        return OK if age <= within else f"no {what} for {age:.1f} s"

    checks = {
        "accepting": OK if accepting else "draining",
        "database": recent(last_answer, "answer from the database"),
        "claim_loop": OK if at_capacity else recent(last_pass, "claim pass"),
    }
    if listening:
        down = 0.0 if wake_down_since is None else now - wake_down_since
        checks["wake"] = OK if down <= within else f"LISTEN session down for {down:.1f} s"
    return Readiness(checks)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_probes(metrics: WsgiApp, readiness: Callable[[], Readiness] | None) -> WsgiApp:
    """A WSGI app answering /healthz and /readyz, and everything else with `metrics`."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _json(start_response, "200 OK", {"status": "ok"})
        if path == "/readyz":
            if readiness is None:
                return _json(start_response, "200 OK", {"ready": True, "checks": {}})
            verdict = readiness()
            status = "200 OK" if verdict.ready else "503 Service Unavailable"
            return _json(start_response, status, verdict.document())
        return metrics(environ, start_response)

    return app


def _json(start_response: Callable[..., Any], status: str, document: dict[str, Any]) -> list[bytes]:
    body = json.dumps(document).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
