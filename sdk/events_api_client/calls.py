"""Every API operation as a `Call`: the request to send and how to read its answer, with no I/O.

Both clients (and the spool) build their requests here, so the sync and async clients cannot drift
apart: they differ only in how they send a `Call` and wait between attempts. Bodies are serialised
once, here, so that a retry or a delivery from the spool sends exactly the bytes of the first attempt
(the API refuses a key reused with a different body).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from events_api_client.errors import EventsApiError
from events_api_client.models import (
    BatchResult,
    DeadLetter,
    DeadLetterPage,
    Event,
    EventStatus,
    LandingCheck,
    PublishResult,
    SchemaRegistered,
)

T = TypeVar("T")
EVENTS_PATH = "/v1/events"
BATCH_PATH = "/v1/events/batch"


def new_idempotency_key() -> str:
    """One fresh key per logical call, reused by every attempt of it."""
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One logical API call. `parse` reads the answer when its status is in `ok`."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    ok: frozenset[int] = frozenset({200, 201, 202})
    body: bytes | None = None
    params: dict[str, str] | None = None
    idempotency_key: str | None = None
    traceparent: str | None = None
    #: Repeating the call after it may have reached the server changes nothing.
    idempotent: bool = True
    #: A 409 means "a request with this key is in flight" (publishes), worth waiting for.
    conflict_in_flight: bool = False
    #: The result to return when the call is put in the local spool instead (publishes only).
    spooled: Callable[[], T] | None = None

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.body is not None:
            headers["Content-Type"] = "application/json"
        if self.idempotency_key is not None:
            headers["Idempotency-Key"] = self.idempotency_key
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
        return headers


def encode(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def json_body(response: httpx.Response) -> Any:
    """The decoded body of a successful answer; a body that is not JSON is an error of the front, not a crash."""
    try:
        return response.json()
    except ValueError:
        raise EventsApiError(
            response.status_code, "about:blank", "Unexpected response", f"not JSON: {response.text[:200]!r}"
        ) from None


def _replayed(response: httpx.Response) -> bool:
    return str(response.headers.get("Idempotent-Replayed", "")).lower() == "true"


def publish(event: Event, idempotency_key: str, traceparent: str | None = None) -> Call[PublishResult]:
    def parse(response: httpx.Response) -> PublishResult:
        return PublishResult.from_json(
            json_body(response),
            idempotency_key=idempotency_key,
            replayed=_replayed(response),
            location=response.headers.get("Location"),
        )

    def spooled() -> PublishResult:
        return PublishResult(None, "spooled", event.event_type, event.schema_version, None, idempotency_key)

    return Call(
        "POST",
        EVENTS_PATH,
        parse,
        ok=frozenset({202}),
        body=encode(event.to_json()),
        idempotency_key=idempotency_key,
        traceparent=traceparent,
        conflict_in_flight=True,
        spooled=spooled,
    )


def publish_batch(events: Sequence[Event], idempotency_key: str, traceparent: str | None = None) -> Call[BatchResult]:
    if not events:
        raise ValueError("a batch needs at least one event")

    def parse(response: httpx.Response) -> BatchResult:
        replayed = _replayed(response)
        results = [
            PublishResult.from_json(item, idempotency_key=idempotency_key, replayed=replayed)
            for item in json_body(response)["events"]
        ]
        return BatchResult(results, "accepted", idempotency_key, replayed)

    return Call(
        "POST",
        BATCH_PATH,
        parse,
        ok=frozenset({202}),
        body=encode({"events": [event.to_json() for event in events]}),
        idempotency_key=idempotency_key,
        traceparent=traceparent,
        conflict_in_flight=True,
        spooled=lambda: BatchResult([], "spooled", idempotency_key),
    )


def resend(path: str, body: bytes, idempotency_key: str, traceparent: str | None) -> Call[None]:
    """A spooled publish, sent again byte for byte under its original key."""
    return Call(
        "POST",
        path,
        lambda _: None,
        ok=frozenset({202}),
        body=body,
        idempotency_key=idempotency_key,
        traceparent=traceparent,
        conflict_in_flight=True,
    )


def get_event(event_id: str) -> Call[EventStatus]:
    return Call("GET", f"{EVENTS_PATH}/{quote(event_id, safe='')}", lambda r: EventStatus.from_json(json_body(r)))


def check_landed(idempotency_key: str) -> Call[LandingCheck]:
    """`GET /v1/events?idempotency_key=K`: the event of a single publish, or the events of a batch."""

    def parse(response: httpx.Response) -> LandingCheck:
        if response.status_code == 404:
            return LandingCheck(idempotency_key)
        body = json_body(response)
        batch = "events" in body
        items = body["events"] if batch else [body]
        return LandingCheck(idempotency_key, [EventStatus.from_json(item) for item in items], batch)

    return Call("GET", EVENTS_PATH, parse, ok=frozenset({200, 404}), params={"idempotency_key": idempotency_key})


def register_schema(event_type: str, schema: dict[str, Any]) -> Call[SchemaRegistered]:
    def parse(response: httpx.Response) -> SchemaRegistered:
        body = json_body(response)
        return SchemaRegistered(body["event_type"], body["version"], body["compatibility"], response.status_code == 201)

    # Idempotent by the API's rule: registering an identical schema again answers 200 with its version.
    return Call("POST", f"/v1/schemas/{quote(event_type, safe='')}/versions", parse, body=encode({"schema": schema}))


def dead_letter_page(event_type: str | None, limit: int, cursor: str | None) -> Call[DeadLetterPage]:
    params = {"limit": str(limit)}
    if event_type is not None:
        params["event_type"] = event_type
    if cursor is not None:
        params["cursor"] = cursor

    def parse(response: httpx.Response) -> DeadLetterPage:
        body = json_body(response)
        return DeadLetterPage([DeadLetter.from_json(item) for item in body["dead_letters"]], body["next_cursor"])

    return Call("GET", "/v1/dead-letters", parse, params=params)


def redrive(event_id: str) -> Call[None]:
    # Not idempotent: once redriven the event is no longer a dead letter, so a blind repeat answers 404.
    return Call("POST", f"/v1/dead-letters/{quote(event_id, safe='')}/redrive", lambda _: None, idempotent=False)


def redrive_all(event_type: str | None) -> Call[int]:
    return Call(
        "POST",
        "/v1/dead-letters/redrive",
        lambda r: int(json_body(r)["count"]),
        body=encode({"event_type": event_type} if event_type is not None else {}),
        idempotent=False,
    )
