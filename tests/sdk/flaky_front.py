"""A flaky front for the real server: a small HTTP proxy, in a thread, that answers each request as its
script says (an error status, a dropped connection, a stall) and otherwise forwards it to the server.

It records what it saw (method, path, Idempotency-Key, when), so tests can check that every attempt of
one call carried the same key, how many attempts there were and how long the client waited between them.
It serves HTTP/1.1 with keep-alive, as a load balancer would, so a drop really kills a pooled connection.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


class Act(enum.Enum):
    FORWARD = "forward"
    #: Close the connection without forwarding: the server never sees the request.
    DROP = "drop"
    #: Forward (the server handles the request), then close the connection: the answer is lost.
    FORWARD_THEN_DROP = "forward_then_drop"
    #: Forward, then hold the answer until the client gives up (its read timeout), then close.
    FORWARD_THEN_STALL = "forward_then_stall"


@dataclass(frozen=True)
class Reply:
    """Answer this, without forwarding."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


Step = Act | Reply


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    idempotency_key: str | None
    at: float


def problem(status: int, slug: str, *, retry_after: str | None = None) -> Reply:
    """A problem+json answer like the API's own (or a gateway's)."""
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    body = f'{{"type":"https://events-api.dev/problems/{slug}","title":"{slug}","status":{status},"detail":"front"}}'
    return Reply(status, headers, body.encode())


class FlakyFront:
    def __init__(self, upstream: str, script: Iterable[Step] = (), *, port: int = 0, stall: float = 5.0) -> None:
        self.upstream = upstream
        self.port = port
        self.stall = stall
        self.seen: list[Seen] = []
        self.default: Step = Act.FORWARD
        self._script: deque[Step] = deque(script)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._http: httpx.Client | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def then(self, *steps: Step) -> None:
        """Queue more steps (after those still queued); `default` answers once the queue is empty."""
        with self._lock:
            self._script.extend(steps)

    def keys(self) -> list[str | None]:
        return [seen.idempotency_key for seen in self.seen]

    def start(self) -> None:
        self._stopped.clear()
        self._http = httpx.Client(base_url=self.upstream, timeout=30)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (new connections are refused) and release stalled requests."""
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
        if self._http is not None:
            self._http.close()
            self._http = None

    def _next(self, seen: Seen) -> Step:
        with self._lock:
            self.seen.append(seen)
            return self._script.popleft() if self._script else self.default

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        assert self._http is not None
        return self._http.request(method, path, headers=headers, content=body)


@contextmanager
def flaky_front(upstream: str, *script: Step, stall: float = 5.0) -> Iterator[FlakyFront]:
    front = FlakyFront(upstream, script, stall=stall)
    front.start()
    try:
        yield front
    finally:
        front.stop()


def _handler(front: FlakyFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the test output is for failures
            pass

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            step = front._next(Seen(self.command, self.path, self.headers.get("Idempotency-Key"), time.monotonic()))
            if isinstance(step, Reply):
                self._answer(step.status, step.headers, step.body)
                return
            if step is Act.DROP:
                self.close_connection = True
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"accept-encoding"}}
            upstream = front._forward(self.command, self.path, headers, body)
            if step is Act.FORWARD_THEN_STALL:
                front._stopped.wait(front.stall)
            if step in (Act.FORWARD_THEN_DROP, Act.FORWARD_THEN_STALL):
                self.close_connection = True
                return
            # send_response writes its own Server and Date.
            kept = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP | {"server", "date"}}
            self._answer(upstream.status_code, kept, upstream.content)

        def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler
