"""Typed, prefixed, time-sortable identifiers (`evt_…`, `key_…`).

An event id is a ULID: 48 bits of milliseconds since the epoch and 80 random bits in Crockford
base32. The time part is the event's `received_at`, which is also the outbox partition key, so a
lookup by id goes straight to one partition.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_ALPHABET)}
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")

EVENT_PREFIX = "evt_"
KEY_PREFIX = "key_"

RandomBytes = Callable[[int], bytes]


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def ulid(at: datetime, random: RandomBytes = os.urandom) -> str:
    millis = int(at.timestamp() * 1000)
    return _encode((millis << 80) | int.from_bytes(random(10), "big"), 26)


def truncate_to_millis(at: datetime) -> datetime:
    """The precision an event id keeps; `received_at` is stored at exactly this precision."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def new_event_id(received_at: datetime, random: RandomBytes = os.urandom) -> str:
    return EVENT_PREFIX + ulid(received_at, random)


def event_id_time(event_id: str) -> datetime | None:
    """The `received_at` encoded in an event id, or None when it is not a well-formed event id."""
    body = event_id.removeprefix(EVENT_PREFIX)
    if len(body) == len(event_id) or not _ULID.fullmatch(body):
        return None
    value = 0
    for char in body[:10]:
        value = value * 32 + _DECODE[char]
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return None


def new_key_id(random: RandomBytes = os.urandom) -> str:
    return KEY_PREFIX + _encode(int.from_bytes(random(10), "big"), 16).lower()
