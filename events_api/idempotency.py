"""Idempotency keys (IETF draft `Idempotency-Key` header) and request fingerprints."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from events_api.errors import InvalidIdempotencyKey

MAX_KEY_LENGTH = 255
_PRINTABLE = re.compile(rf"[\x20-\x7e]{{1,{MAX_KEY_LENGTH}}}")
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')

_canonical = msgspec.json.Encoder(order="sorted")


def parse_idempotency_key(header: str | None) -> str:
    """The key from the header value; the RFC 8941 quoted form `"abc"` means `abc`."""
    if header is None or header.strip() == "":
        raise InvalidIdempotencyKey("the Idempotency-Key header is required (1-255 printable ASCII characters)")
    value = header.strip()
    if value.startswith('"'):
        quoted = _SF_STRING.fullmatch(value)
        if quoted is None:
            raise InvalidIdempotencyKey("the quoted Idempotency-Key is not a valid RFC 8941 string")
        value = re.sub(r"\\([\"\\])", r"\1", quoted.group(1))
    if not _PRINTABLE.fullmatch(value):
        raise InvalidIdempotencyKey(f"the Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters")
    return value


def fingerprint(operation: str, normalised: Any) -> bytes:
    """SHA-256 of the operation and the normalised request, with object keys sorted."""
    return hashlib.sha256(operation.encode() + b"\x00" + _canonical.encode(normalised)).digest()
