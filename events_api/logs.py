"""The one logging setup: one JSON object per line on stderr (`EVENTS_API_LOG_FORMAT=json`, the default), or
plain text for people (`EVENTS_API_LOG_FORMAT=text`).

A line holds `ts` (UTC, milliseconds), `level`, `logger`, `msg`, the fields the code attached with
`extra=fields(...)`, `request_id` when it was logged while handling a request, and `exc` (the traceback) for
errors. Nothing here ever logs a request's body, an API key or a token: callers pass only ids, counts, names
and durations (tests/integration/test_no_secrets_in_logs.py).

`log_request` writes the one line per HTTP request. It is on the hot path, so once `setup_logging` made the
JSON handler the root's only handler it encodes and queues the line itself (about 2 µs instead of the
logging module's 13); anywhere else (tests capturing records, text format) it goes through `logging`.

Lines are formatted where they are logged and written to stderr by one background thread (`LineWriter`), so
a slow or stuck reader of stderr (a full pipe nobody drains, a blocked log shipper) never stalls the event
loop: past MAX_QUEUED waiting lines new ones are dropped and counted (`dropped_lines`), and a note of how
many is written once the writer catches up. At exit what is queued is written (for up to 2 s).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

import msgspec

REQUEST_FIELDS = "events_api.request_fields"  # ASGI scope key: the fields handlers add to the request's line
FORMATS = ("json", "text")
ACCESS_LOGGER = "events_api.access"

# The id of the request being handled (set by the HTTP app around each request): every line logged meanwhile
# carries it, so a request's warnings and its access line can be found together.
current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)

MAX_QUEUED = 10_000

_encode = msgspec.json.Encoder().encode
_access = logging.getLogger(ACCESS_LOGGER)
_fast_handler: QueuedHandler | None = None
_second = -1
_second_text = ""


def fields(**values: object) -> dict[str, Any]:
    """`log.info("relay batch", extra=fields(events=12, published=12))`: structured fields of one line."""
    return {"fields": values}


def annotate(scope: Any, **values: object) -> None:
    """Add fields (tenant, events, event_id: never secrets) to the access line of the request of `scope`."""
    found = scope.get(REQUEST_FIELDS)
    if found is not None:
        found.update(values)


def _timestamp(created: float) -> str:
    global _second, _second_text
    second = int(created)
    if second != _second:  # formatting the date once per second, not once per line
        _second, _second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_text}.{int((created - second) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if extra:
            line.update(extra)
        request_id = current_request_id.get()
        if request_id is not None and "request_id" not in line:
            line["request_id"] = request_id
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode(line).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra: Mapping[str, object] | None = getattr(record, "fields", None)
        request_id = current_request_id.get()
        pairs = {**({"request_id": request_id} if request_id else {}), **(extra or {})}
        if not pairs:
            return text
        head, newline, rest = text.partition("\n")  # the traceback, if any, stays below the line
        return head + "".join(f" {k}={v}" for k, v in pairs.items()) + newline + rest


class LineWriter:
    """Writes queued lines to a stream from its own thread; never blocks the caller."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.lines: queue.Queue[str | None] = queue.Queue(MAX_QUEUED)
        self.dropped_lines = 0
        self._reported = 0
        self._thread = threading.Thread(target=self._run, name="events-api-log-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def put(self, line: str) -> None:
        try:
            self.lines.put_nowait(line)
        except queue.Full:
            self.dropped_lines += 1

    def _run(self) -> None:
        while (line := self.lines.get()) is not None:
            self._write(line)
            if self.lines.empty():
                self._caught_up()
        self._caught_up()

    def _caught_up(self) -> None:
        """Nothing waits: say how many lines were dropped since the last time, and flush."""
        if self.dropped_lines != self._reported:
            lost, self._reported = self.dropped_lines - self._reported, self.dropped_lines
            note = {"ts": _timestamp(time.time()), "level": "warning", "logger": "events_api.logs"}
            self._write(_encode({**note, "msg": f"{lost} log line(s) dropped: stderr was not read"}).decode() + "\n")
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def _write(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # stderr closed or gone: a lost line must not fail anything
            self.stream.write(line)

    def close(self) -> None:
        """Write what is queued (for up to 2 s), then stop."""
        with contextlib.suppress(queue.Full):
            self.lines.put(None, timeout=2)
        self._thread.join(timeout=2)


class QueuedHandler(logging.Handler):
    """Formats a record in the logging thread (so it carries that thread's request id) and queues the line."""

    def __init__(self, writer: LineWriter) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.put(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_writer: LineWriter | None = None


def setup_logging(level: int = logging.INFO, fmt: str = "json") -> None:
    """Route every record (uvicorn's too) to one handler on stderr, in `fmt` (EVENTS_API_LOG_FORMAT)."""
    global _fast_handler, _writer
    chosen = fmt
    if _writer is None or _writer.stream is not sys.stderr:
        _writer = LineWriter(sys.stderr)
    handler = QueuedHandler(_writer)
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        # uvicorn configured its own text handlers before loading the app: its lines go through ours instead.
        # (Not uvicorn.access: `serve` turns uvicorn's access log off; log_request writes the access lines.)
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    _fast_handler = handler if chosen == "json" else None


def log_request(line: dict[str, Any]) -> None:
    """One line for a finished HTTP request: method, route, status, duration_ms, request_id, and tenant,
    events, event_id when known. Never a header value, query or body."""
    if not _access.isEnabledFor(logging.INFO):
        return
    handler = _fast_handler
    if handler is None or logging.getLogger().handlers != [handler] or _access.handlers:
        _access.info("request", extra={"fields": line})
        return
    created = time.time()
    encoded = _encode({"ts": _timestamp(created), "level": "info", "logger": ACCESS_LOGGER, "msg": "request", **line})
    handler.writer.put(encoded.decode() + "\n")
