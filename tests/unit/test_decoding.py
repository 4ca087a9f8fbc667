from __future__ import annotations

import pytest

from events_api.decoding import decode_body
from events_api.errors import BadRequest, ValidationFailed
from events_api.ingest import decode_batch, decode_event


def _pointer(body: bytes, batch: bool = False) -> str:
    decode = (lambda: decode_batch(body, "native", 500)) if batch else (lambda: decode_event(body, "native"))
    with pytest.raises(ValidationFailed) as caught:
        decode()
    return caught.value.errors[0].pointer


def test_pointers_into_the_request_body() -> None:
    assert _pointer(b'{"payload": {}}') == "/event_type"
    assert _pointer(b'{"event_type": "a", "payload": {}, "schema_version": "1"}') == "/schema_version"
    assert _pointer(b'{"event_type": "a", "payload": {}, "surprise": 1}') == "/surprise"
    assert _pointer(b'{"event_type": "a", "payload": []}') == "/payload"
    assert _pointer(b'{"event_type": "9bad", "payload": {}}') == "/event_type"
    assert _pointer(b'{"event_type": "a", "payload": {}, "occurred_at": "2026-01-01T00:00:00"}') == "/occurred_at"
    assert (
        _pointer(b'{"events": [{"event_type": "a", "payload": {}}, {"event_type": "a"}]}', True) == "/events/1/payload"
    )
    assert _pointer(b'{"events": []}', True) == "/events"


def test_batch_size_is_bounded() -> None:
    body = b'{"events": [' + b",".join([b'{"event_type": "a", "payload": {}}'] * 3) + b"]}"
    assert len(decode_batch(body, "native", 3)) == 3
    with pytest.raises(ValidationFailed) as caught:
        decode_batch(body, "native", 2)
    assert caught.value.errors[0].pointer == "/events"


def test_cloudevents_map_to_native_fields() -> None:
    event = decode_event(
        b'{"specversion": "1.0", "id": "1", "source": "/s", "type": "order.created", "data": {"a": 1},'
        b' "partitionkey": "k", "time": "2026-01-01T00:00:00Z", "traceext": "ignored"}',
        "cloudevents",
    )
    assert (event.event_type, event.payload, event.partition_key) == ("order.created", {"a": 1}, "k")
    assert event.payload_pointer == "/data"


def test_not_json_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        decode_body(b"{nope", dict)
