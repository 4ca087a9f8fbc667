"""Dead letters: the events the relay could not deliver, listed page by page and redriven on request."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

import msgspec

from events_api.errors import BadRequest, NotFound
from events_api.models import DeadLetterOut, DeadLetterPage
from events_api.schemas import check_event_type
from events_api.storage.database import Database
from events_api.storage.dead_letters import DeadLetterStore

MAX_PAGE = 500


def encode_cursor(dead_lettered_at: datetime, event_id: str) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([dead_lettered_at, event_id])).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, event_id = msgspec.json.decode(raw, type=tuple[datetime, str])
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise BadRequest("the cursor is not one this API returned") from None
    return at, event_id


class DeadLetters:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(self, tenant_id: str, *, event_type: str | None, limit: int, cursor: str | None) -> DeadLetterPage:
        if event_type is not None:
            check_event_type(event_type)
        after = decode_cursor(cursor) if cursor else None
        rows = await DeadLetterStore(self.db, tenant_id).page(event_type=event_type, limit=limit, after=after)
        items = [
            DeadLetterOut(
                r.event_id,
                r.event_type,
                r.schema_version,
                r.partition_key,
                r.attempts,
                r.last_error,
                r.original_topic,
                r.received_at,
                r.dead_lettered_at,
            )
            for r in rows
        ]
        next_cursor = encode_cursor(rows[-1].dead_lettered_at, rows[-1].event_id) if len(rows) == limit else None
        return DeadLetterPage(items, next_cursor)

    async def redrive_one(self, tenant_id: str, event_id: str, now: datetime, *, actor: str) -> None:
        store = DeadLetterStore(self.db, tenant_id)
        moved = await store.redrive(event_ids=[event_id], event_type=None, now=now, actor=actor)
        if not moved:
            raise NotFound(f"no dead letter {event_id[:80]!r}")

    async def redrive_all(self, tenant_id: str, event_type: str | None, now: datetime, *, actor: str) -> int:
        if event_type is not None:
            check_event_type(event_type)
        store = DeadLetterStore(self.db, tenant_id)
        return await store.redrive(event_ids=None, event_type=event_type, now=now, actor=actor)
