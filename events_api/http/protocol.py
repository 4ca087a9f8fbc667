"""uvicorn's httptools protocol with the limits a public HTTP service needs and uvicorn does not set:
a request's line and headers must arrive within READ_TIMEOUT (slow-loris) and stay within
MAX_REQUEST_HEADER_BYTES / MAX_REQUEST_HEADERS (431). The body's own deadline is enforced where it is
read (`services.read_body`). Both answers are problem+json and close the connection.

`events-api serve` passes this class to uvicorn (`http=`); an app mounted in another server keeps that
server's behaviour."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from events_api.errors import Problem, RequestHeaderFieldsTooLarge, RequestTimeout
from events_api.limits import MAX_REQUEST_HEADER_BYTES, MAX_REQUEST_HEADERS
from events_api.models import Problem as ProblemBody
from events_api.settings import Settings


@functools.cache
def read_timeout() -> float:
    return Settings.from_env().read_timeout.total_seconds()


def problem_response(problem: Problem) -> bytes:
    """A complete HTTP/1.1 response for `problem` that ends the connection."""
    body = msgspec.json.encode(ProblemBody(problem.type, problem.title, problem.status, problem.detail))
    head = (
        f"HTTP/1.1 {problem.status} {problem.title}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedHttpProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._header_count = 0
        self._refusal: Problem | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a request line is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = self._header_count = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4, 1)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers every parser failure with a plain 400; a failure we raised gets its own answer.
        if self._refusal is None:
            super().send_400_response(msg)
            return
        self._end(self._refusal)

    def _count(self, size: int, headers: int) -> None:
        self._header_bytes += size
        self._header_count += headers
        if self._header_bytes > MAX_REQUEST_HEADER_BYTES or self._header_count > MAX_REQUEST_HEADERS:
            self._refusal = RequestHeaderFieldsTooLarge(
                f"a request may carry at most {MAX_REQUEST_HEADERS} header fields and "
                f"{MAX_REQUEST_HEADER_BYTES} bytes of request line and headers"
            )
            raise ValueError("request headers too large")  # httptools stops parsing; see send_400_response

    def _arm(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(read_timeout(), self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being handled; its own deadlines apply
        self._end(RequestTimeout(f"the request line and headers did not arrive within {read_timeout():g} s"))

    def _end(self, problem: Problem) -> None:
        self.transport.write(problem_response(problem))
        self.transport.close()
