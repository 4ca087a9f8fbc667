"""`AsyncEventsClient`: the asyncio twin of `EventsClient`, with the same methods and the same requests,
answers and retry decisions (from `calls` and `retry`); only sending, sleeping and the spool's disk
writes (in a worker thread, off the event loop) differ."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
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


class AsyncEventsClient(BaseClient):
    """The asyncio client; see `EventsClient` for the settings. Use `async with` (or `await aclose()`).
    With a spool, the background flusher is a task started on `async with` or on the first spooled event."""

    def _open(self) -> None:
        self._http = httpx.AsyncClient(**self._http_options)
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncEventsClient:
        self._ensure_flusher()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the flusher (spooled events stay in the file) and close the connections."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self._http.aclose()

    # --- events -----------------------------------------------------------------------------------

    async def publish(
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
        """See `EventsClient.publish`."""
        event = Event(event_type, payload, partition_key, schema_version, headers, occurred_at)
        return await self._deliver(calls.publish(event, idempotency_key or calls.new_idempotency_key(), traceparent))

    async def publish_batch(
        self, events: Sequence[Event], *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> BatchResult:
        """See `EventsClient.publish_batch`."""
        key = idempotency_key or calls.new_idempotency_key()
        return await self._deliver(calls.publish_batch(events, key, traceparent))

    async def get_event(self, event_id: str) -> EventStatus:
        return await self._execute(calls.get_event(event_id))

    async def find_event(self, idempotency_key: str) -> EventStatus | None:
        """See `EventsClient.find_event`."""
        return (await self.check_landed(idempotency_key)).single_event()

    async def check_landed(self, idempotency_key: str) -> LandingCheck:
        """See `EventsClient.check_landed`."""
        return await self._execute(calls.check_landed(idempotency_key))

    # --- schemas and dead letters -----------------------------------------------------------------

    async def register_schema(self, event_type: str, schema: dict[str, Any]) -> SchemaRegistered:
        return await self._execute(calls.register_schema(event_type, schema))

    async def dead_letters(self, *, event_type: str | None = None, page_size: int = 100) -> AsyncIterator[DeadLetter]:
        """Every dead letter, oldest first, fetched page by page as you iterate (`async for`)."""
        cursor: str | None = None
        while True:
            page = await self._execute(calls.dead_letter_page(event_type, page_size, cursor))
            for dead_letter in page.dead_letters:
                yield dead_letter
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def redrive(self, event_id: str) -> None:
        await self._execute(calls.redrive(event_id))

    async def redrive_all(self, *, event_type: str | None = None) -> int:
        return await self._execute(calls.redrive_all(event_type))

    # --- spool ------------------------------------------------------------------------------------

    async def flush(self) -> FlushReport:
        """See `EventsClient.flush`."""
        return await self._flush(self.retry)

    async def _flush(self, policy: RetryPolicy) -> FlushReport:
        spool = self._require_spool()
        tally = FlushTally()
        async with self._flush_lock:
            while entries := await asyncio.to_thread(spool.oldest):
                for entry in entries:
                    error: EventsApiError | None = None
                    try:
                        call = calls.resend(entry.path, entry.body, entry.idempotency_key, entry.traceparent)
                        await self._execute(call, policy)
                    except EventsApiError as exc:
                        error = exc
                    if not tally.add(await asyncio.to_thread(spool.settle, entry, error)):
                        return tally.report(await asyncio.to_thread(spool.size))
            return tally.report(await asyncio.to_thread(self._drained))

    def _ensure_flusher(self) -> None:
        if self.spool is not None and self.flush_interval is not None and self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_forever(self.flush_interval))

    async def _flush_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if self._backlog:
                try:
                    await self._flush(self._probe_policy)
                except Exception:  # the task must outlive a bad round (e.g. a locked disk)
                    log.warning("flushing the events spool failed; will try again", exc_info=True)

    # --- sending ----------------------------------------------------------------------------------

    async def _deliver(self, call: Call[T]) -> T:
        """See `EventsClient._deliver`."""
        if call.spooled is not None:
            self._ensure_flusher()
        if self._backlog and call.spooled is not None:
            await asyncio.to_thread(self._spool_call, call)
            return call.spooled()
        try:
            return await self._execute(call)
        except EventsApiError as error:
            if call.spooled is None or not self._should_spool(error):
                raise
            log.warning("events API unavailable, spooled %s: %s", call.idempotency_key, error)
            await asyncio.to_thread(self._spool_call, call)
            return call.spooled()

    async def _execute(self, call: Call[T], policy: RetryPolicy | None = None) -> T:
        attempts = Attempts(
            policy or self.retry,
            idempotent=call.idempotent,
            conflict_in_flight=call.conflict_in_flight,
            idempotency_key=call.idempotency_key,
        )
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, content=call.body, params=call.params, headers=call.headers()
                )
            except httpx.TransportError as exc:
                await asyncio.sleep(attempts.after_failure(exc))
                continue
            if response.status_code in call.ok:
                return call.parse(response)
            await asyncio.sleep(attempts.after_failure(response))
