from __future__ import annotations

import pytest

from events_api.errors import InvalidIdempotencyKey
from events_api.idempotency import fingerprint, parse_idempotency_key


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("abc", "abc"),
        ('"abc"', "abc"),
        ('"a\\"b\\\\c"', 'a"b\\c'),
        ("  spaced  ", "spaced"),
        ("x" * 255, "x" * 255),
        ("with inner space", "with inner space"),
    ],
)
def test_valid_keys(header: str, key: str) -> None:
    assert parse_idempotency_key(header) == key


@pytest.mark.parametrize(
    "header", [None, "", "   ", '""', '"unterminated', '"bad\\escape"', "x" * 256, "tab\there", "naïve", "\x01"]
)
def test_invalid_keys(header: str | None) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_idempotency_key(header)


def test_fingerprint_ignores_key_order_but_not_values_or_operation() -> None:
    a = fingerprint("event", [{"payload": {"x": 1, "y": {"b": 2, "a": 1}}, "event_type": "t"}])
    b = fingerprint("event", [{"event_type": "t", "payload": {"y": {"a": 1, "b": 2}, "x": 1}}])
    assert a == b
    assert a != fingerprint("event", [{"event_type": "t", "payload": {"x": 2, "y": {"a": 1, "b": 2}}}])
    assert a != fingerprint("batch", [{"event_type": "t", "payload": {"x": 1, "y": {"a": 1, "b": 2}}}])
