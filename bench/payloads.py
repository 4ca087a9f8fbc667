"""Request bytes for the load generator, precomputed so that each request costs a format or a join.

Every request gets a unique `Idempotency-Key` (`<prefix>-<n>`); the events' ids vary with `n`.
"""

from __future__ import annotations

import json
import math

from bench.loadgen import RequestFactory

EVENT_TYPE = "order.created"
_MARK = "@N@"


def _head(method: bytes, path: bytes, host: str, port: int, api_key: str | None, key_prefix: str) -> bytes:
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: %s:%d" % (host.encode(), port)]
    if api_key:
        lines.append(b"Authorization: Bearer " + api_key.encode())
    lines += [b"Content-Type: application/json", b"Idempotency-Key: " + key_prefix.encode() + b"-"]
    return b"\r\n".join(lines)


_SINGLE_BODY = (
    b'{"event_type":"order.created","payload":{"order_id":"o-%d","amount":%d,"currency":"EUR"},"partition_key":"o-%d"}'
)


def single_event(host: str, port: int, api_key: str | None, key_prefix: str) -> RequestFactory:
    """`POST /v1/events`: order `o-<n>`, amount n, partition key `o-<n mod 1000>`."""
    head = _head(b"POST", b"/v1/events", host, port, api_key, key_prefix)

    def make(n: int) -> bytes:
        body = _SINGLE_BODY % (n, n, n % 1000)
        return b"%b%d\r\nContent-Length: %d\r\n\r\n%b" % (head, n, len(body), body)

    return make


def batch_body_parts(size: int) -> list[list[bytes]]:
    """For each `n mod variants`, the batch body split at the places where `n` goes.

    Event i of request n: order `o-<n>-<i>`, amount i, partition key `o-<(n*size + i) mod 1000>`
    (which depends on n only through `n mod variants`, 10 variants for batches of 100).
    """
    variants = 1000 // math.gcd(size, 1000)
    parts: list[list[bytes]] = []
    for variant in range(variants):
        events = [
            {
                "event_type": EVENT_TYPE,
                "payload": {"order_id": f"o-{_MARK}-{i}", "amount": i, "currency": "EUR"},
                "partition_key": f"o-{(variant * size + i) % 1000}",
            }
            for i in range(size)
        ]
        body = json.dumps({"events": events}, separators=(",", ":")).encode()
        parts.append(body.split(_MARK.encode()))
    return parts


def batch(host: str, port: int, api_key: str | None, key_prefix: str, size: int) -> RequestFactory:
    """`POST /v1/events/batch` with `size` events per request."""
    head = _head(b"POST", b"/v1/events/batch", host, port, api_key, key_prefix)
    parts = batch_body_parts(size)
    variants = len(parts)

    def make(n: int) -> bytes:
        body = str(n).encode().join(parts[n % variants])
        return b"%b%d\r\nContent-Length: %d\r\n\r\n%b" % (head, n, len(body), body)

    return make


_MASK64 = (1 << 64) - 1


def single_event_uuid_keys(host: str, port: int, api_key: str, salt: int) -> RequestFactory:
    """Like `single_event`, but the `Idempotency-Key` is a UUID-shaped key spread over the whole key space, as
    clients' random UUIDs are (`single_event`'s `<prefix>-<n>` keys all land next to each other in the key
    index, which hides what a large index costs). Request n's key is a bijection of n for a given `salt`."""
    head = _head(b"POST", b"/v1/events", host, port, api_key, "").removesuffix(b"-")
    low_salt = (salt * 0xD6E8FEB86659FD93) & _MASK64

    def make(n: int) -> bytes:
        high = ((n + salt) * 0x9E3779B97F4A7C15) & _MASK64  # odd multiplier: a bijection mod 2^64
        low = (n ^ low_salt) * 0xBF58476D1CE4E5B9 & _MASK64
        h = b"%016x%016x" % (high, low)
        key = b"%b-%b-%b-%b-%b" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
        body = _SINGLE_BODY % (n, n, n % 1000)
        return b"%b%b\r\nContent-Length: %d\r\n\r\n%b" % (head, key, len(body), body)

    return make
