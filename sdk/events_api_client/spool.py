"""The local durable spool: publishes the API could not take are kept in a SQLite file until a flush
delivers them, across process restarts.

Each entry is the exact request body with the idempotency key it was first sent under, so delivering it
later (once, twice, from two processes) can never store the event twice: the API answers a repeated
key with the stored response. Entries are delivered oldest first and a flush stops at the first one
the API still cannot take, so events keep their order. An entry the API refuses for good (e.g. its
event type was deleted meanwhile) is marked rejected and kept for inspection, never dropped silently.

SQLite in WAL mode with `synchronous=FULL`: a `put` that returned survives a crash of the process or
the machine. Every operation opens its own connection, so one spool serves threads and processes.
"""

from __future__ import annotations

import enum
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from events_api_client.errors import EventsApiError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spooled_requests (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT    NOT NULL UNIQUE,
    path            TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    traceparent     TEXT,
    spooled_at      REAL    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    rejected_at     REAL
)
"""


@dataclass(frozen=True, slots=True)
class SpooledRequest:
    """One publish waiting in the spool (`path` is `/v1/events` or `/v1/events/batch`)."""

    id: int
    idempotency_key: str
    path: str
    body: bytes
    traceparent: str | None
    spooled_at: float
    attempts: int
    last_error: str | None


class Settled(enum.Enum):
    DELIVERED = "delivered"
    REJECTED = "rejected"
    #: The API still cannot take it: stop this flush here, to keep the order.
    DEFERRED = "deferred"


class Spool:
    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30)) as conn:
            conn.execute("PRAGMA synchronous=FULL")
            with conn:  # one transaction, committed on success
                yield conn

    def put(self, path: str, body: bytes, idempotency_key: str, traceparent: str | None) -> None:
        """Keep a publish for later. The same key twice keeps the first: it is one event."""
        with self._connect() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO spooled_requests (idempotency_key, path, body, traceparent, spooled_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (idempotency_key, path, body, traceparent, self.clock()),
            )

    def size(self) -> int:
        """Entries still to deliver (rejected ones not counted)."""
        with self._connect() as conn:
            (count,) = conn.execute("SELECT count(*) FROM spooled_requests WHERE rejected_at IS NULL").fetchone()
        return int(count)

    def oldest(self, limit: int = 100) -> list[SpooledRequest]:
        """The next entries to deliver, in the order they were spooled."""
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, idempotency_key, path, body, traceparent, spooled_at, attempts, last_error"
                " FROM spooled_requests WHERE rejected_at IS NULL ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        return [SpooledRequest(*row) for row in rows]

    def rejected(self) -> list[SpooledRequest]:
        """Entries the API refused for good, with its answer in `last_error`."""
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, idempotency_key, path, body, traceparent, spooled_at, attempts, last_error"
                " FROM spooled_requests WHERE rejected_at IS NOT NULL ORDER BY id"
            ).fetchall()
        return [SpooledRequest(*row) for row in rows]

    def settle(self, entry: SpooledRequest, error: EventsApiError | None) -> Settled:
        """Record the outcome of one delivery attempt of `entry` (`error` None: the API accepted it)."""
        with self._connect() as conn:
            if error is None:
                conn.execute("DELETE FROM spooled_requests WHERE id = ?", (entry.id,))
                return Settled.DELIVERED
            rejected_at = None if error.retriable else self.clock()
            conn.execute(
                "UPDATE spooled_requests SET attempts = attempts + 1, last_error = ?, rejected_at = ? WHERE id = ?",
                (str(error), rejected_at, entry.id),
            )
        return Settled.DEFERRED if error.retriable else Settled.REJECTED
