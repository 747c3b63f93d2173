"""A real HTTP receiver for webhook deliveries: a ThreadingHTTPServer on 127.0.0.1 whose answers
each test scripts (status, headers, body, how long it holds the request), recording every request
it gets and whether its client went away while it was held."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_TICK = 0.02  # seconds between two looks at a held request's connection


@dataclass(frozen=True)
class Received:
    """One request as the receiver read it: its headers in the order sent, its body's bytes."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    at: float  # time.time() when its body had been read

    def header(self, name: str) -> str | None:
        found = self.all(name)
        return found[0] if found else None

    def all(self, name: str) -> list[str]:
        """Every value sent under `name`, whatever the case of either."""
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def as_dict(self) -> dict[str, str]:
        return {key: value for key, value in self.headers}


@dataclass(frozen=True)
class Answer:
    """What the receiver answers: `hold` seconds after reading the request, unless its client
    closes the connection first (then nothing is answered, and the request counts as aborted)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    hold: float = 0.0
    drop: bool = False  # after the hold, close the connection without answering


Script = Callable[[Received, int], Answer]  # the request, and how many came before it


class Receiver:
    """Start with `start()`, stop with `stop()`; `script` may be replaced at any time."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda _request, _index: Answer())
        self.requests: list[Received] = []
        self.aborted: list[Received] = []  # held requests whose client went away
        self.answered: list[Received] = []  # requests whose answer was written whole
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path == path)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # a held request stops waiting
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _received(self, request: Received) -> int:
        with self._lock:
            self.requests.append(request)
            return len(self.requests) - 1

    def _note(self, bucket: list[Received], request: Received) -> None:
        with self._lock:
            bucket.append(request)

    def _hold(self, connection: socket.socket, seconds: float) -> bool:
        """Wait `seconds`; answer False as soon as the client has closed its connection."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self._stopping.is_set():
            readable, _, _ = select.select([connection], [], [], HOLD_TICK)
            if readable:
                try:
                    if connection.recv(1, socket.MSG_PEEK) == b"":
                        return False
                except OSError:
                    return False
        return True


def _handler_for(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            request = Received(
                method=self.command,
                path=self.path,
                headers=list(self.headers.items()),
                body=body,
                at=time.time(),
            )
            index = receiver._received(request)
            answer = receiver.script(request, index)
            if answer.hold and not receiver._hold(self.connection, answer.hold):
                receiver._note(receiver.aborted, request)
                self.close_connection = True
                return
            if answer.drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            try:
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                self.wfile.flush()
            except OSError:
                receiver._note(receiver.aborted, request)
                return
            receiver._note(receiver.answered, request)

        do_POST = _serve  # the names http.server dispatches to
        do_GET = _serve
        do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the test reads `receiver.requests`

    return Handler
