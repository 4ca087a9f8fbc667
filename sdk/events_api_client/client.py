"""`EventsClient`: the blocking client. Requests, answers and retry decisions come from `calls` and
`retry`; this module only sends them over a pooled `httpx.Client` and sleeps between attempts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx

from events_api_client import calls
from events_api_client.base import BaseClient, FlushTally
from events_api_client.calls import Call
from events_api_client.errors import EventsApiError
from events_api_client.models import (
    BatchResult,
    DeadLetter,
    Event,
    EventStatus,
    FlushReport,
    LandingCheck,
    PublishResult,
    SchemaRegistered,
)
from events_api_client.retry import Attempts, RetryPolicy

T = TypeVar("T")
log = logging.getLogger("events_api_client")


class EventsClient(BaseClient):
    """A client of the Events API; thread-safe, one per process is enough. Use it as a context manager
    (or call `close()`): it holds pooled connections and, with a spool, a background flusher thread.

    `retry` bounds each call (attempts and total time); every attempt of one call carries the same
    Idempotency-Key. With `spool_path`, a publish that still fails for a transient reason after its
    retries is kept in that SQLite file and delivered later: by a background thread every
    `flush_interval` seconds (None: only when you call `flush()`), also after a restart.
    """

    def _open(self) -> None:
        self._http = httpx.Client(**self._http_options)
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if self.spool is not None and self.flush_interval is not None:
            self._flusher = threading.Thread(target=self._flush_forever, name="events-api-spool", daemon=True)
            self._flusher.start()

    def __enter__(self) -> EventsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the flusher (spooled events stay in the file) and close the connections."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        self._http.close()

    # --- events -----------------------------------------------------------------------------------

    def publish(
        self,
        event_type: str,
        payload: dict[str, Any],
        *,
        partition_key: str | None = None,
        idempotency_key: str | None = None,
        schema_version: int | None = None,
        headers: dict[str, str] | None = None,
        occurred_at: datetime | None = None,
        traceparent: str | None = None,
    ) -> PublishResult:
        """Publish one event; returns once the API stored it durably (or the spool did: `result.spooled`).
        Without `idempotency_key` a fresh one is generated; pass your own (e.g. `order-42-created`) to make
        repeats of the same business fact collapse into one event."""
        event = Event(event_type, payload, partition_key, schema_version, headers, occurred_at)
        return self._deliver(calls.publish(event, idempotency_key or calls.new_idempotency_key(), traceparent))

    def publish_batch(
        self, events: Sequence[Event], *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> BatchResult:
        """Publish events all or nothing, under one key for the batch."""
        return self._deliver(calls.publish_batch(events, idempotency_key or calls.new_idempotency_key(), traceparent))

    def get_event(self, event_id: str) -> EventStatus:
        """The delivery status of an event; `NotFoundError` when there is none."""
        return self._execute(calls.get_event(event_id))

    def find_event(self, idempotency_key: str) -> EventStatus | None:
        """The event a single publish stored under `idempotency_key`, or None when nothing is stored
        (for a batch key, read `check_landed(key).events`)."""
        return self.check_landed(idempotency_key).single_event()

    def check_landed(self, idempotency_key: str) -> LandingCheck:
        """Whether a publish (single or batch) under this key stored its events; `.next_step` says what to
        do when its answer was lost (e.g. after `UnavailableError` with `outcome_unknown`)."""
        return self._execute(calls.check_landed(idempotency_key))

    # --- schemas and dead letters -----------------------------------------------------------------

    def register_schema(self, event_type: str, schema: dict[str, Any]) -> SchemaRegistered:
        """Register `schema` as the next version of `event_type` (`ConflictError` if incompatible)."""
        return self._execute(calls.register_schema(event_type, schema))

    def dead_letters(self, *, event_type: str | None = None, page_size: int = 100) -> Iterator[DeadLetter]:
        """Every dead letter, oldest first, fetched page by page as you iterate."""
        cursor: str | None = None
        while True:
            page = self._execute(calls.dead_letter_page(event_type, page_size, cursor))
            yield from page.dead_letters
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def redrive(self, event_id: str) -> None:
        """Send a dead letter through the relay again (`NotFoundError` if it is not a dead letter)."""
        self._execute(calls.redrive(event_id))

    def redrive_all(self, *, event_type: str | None = None) -> int:
        """Redrive every dead letter (or those of one type); returns how many."""
        return self._execute(calls.redrive_all(event_type))

    # --- spool ------------------------------------------------------------------------------------

    def flush(self) -> FlushReport:
        """Deliver the spooled events now, oldest first, with the client's full retry policy."""
        return self._flush(self.retry)

    def _flush(self, policy: RetryPolicy) -> FlushReport:
        spool = self._require_spool()
        tally = FlushTally()
        with self._flush_lock:
            while entries := spool.oldest():
                for entry in entries:
                    if self._stop.is_set():  # closing: the rest stays spooled for the next process
                        return tally.report(spool.size())
                    error: EventsApiError | None = None
                    try:
                        self._execute(
                            calls.resend(entry.path, entry.body, entry.idempotency_key, entry.traceparent), policy
                        )
                    except EventsApiError as exc:
                        error = exc
                    if not tally.add(spool.settle(entry, error)):
                        return tally.report(spool.size())
            return tally.report(self._drained())

    def _flush_forever(self) -> None:
        while not self._stop.wait(self.flush_interval):
            if self._backlog:
                try:
                    self._flush(self._probe_policy)
                except Exception:  # the thread must outlive a bad round (e.g. a locked disk)
                    log.warning("flushing the events spool failed; will try again", exc_info=True)

    # --- sending ----------------------------------------------------------------------------------

    def _deliver(self, call: Call[T]) -> T:
        """Send a publish, or spool it when the API cannot take it (or events already wait in the spool)."""
        if self._backlog and call.spooled is not None:
            self._spool_call(call)
            return call.spooled()
        try:
            return self._execute(call)
        except EventsApiError as error:
            if call.spooled is None or not self._should_spool(error):
                raise
            log.warning("events API unavailable, spooled %s: %s", call.idempotency_key, error)
            self._spool_call(call)
            return call.spooled()

    def _execute(self, call: Call[T], policy: RetryPolicy | None = None) -> T:
        attempts = Attempts(
            policy or self.retry,
            idempotent=call.idempotent,
            conflict_in_flight=call.conflict_in_flight,
            idempotency_key=call.idempotency_key,
        )
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, content=call.body, params=call.params, headers=call.headers()
                )
            except httpx.TransportError as exc:
                time.sleep(attempts.after_failure(exc))
                continue
            if response.status_code in call.ok:
                return call.parse(response)
            time.sleep(attempts.after_failure(response))
