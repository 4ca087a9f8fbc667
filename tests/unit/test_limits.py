"""Abuse limits on payload shape: a clear 422 pointing at the offending value, never a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events_api.errors import Problem, ValidationFailed
from events_api.ingest import decode_batch, decode_event
from events_api.limits import MAX_ARRAY_ITEMS, MAX_OBJECT_PROPERTIES, MAX_PAYLOAD_DEPTH, check_payload


def _nested(levels: int) -> dict[str, Any]:
    """A payload whose objects nest `levels` deep (the payload itself is level 1)."""
    payload: dict[str, Any] = {}
    for _ in range(levels - 1):
        payload = {"a": payload}
    return payload


def _refusal(payload: Any, pointer: str = "/payload") -> str:
    with pytest.raises(ValidationFailed) as caught:
        check_payload(payload, pointer)
    assert len(caught.value.errors) == 1
    return caught.value.errors[0].pointer


def test_depth_is_bounded_and_the_error_points_at_the_first_level_too_deep() -> None:
    check_payload(_nested(MAX_PAYLOAD_DEPTH), "/payload")
    assert _refusal(_nested(MAX_PAYLOAD_DEPTH + 1)) == "/payload" + "/a" * MAX_PAYLOAD_DEPTH
    # Arrays count as levels too.
    deep_list: Any = []
    for _ in range(MAX_PAYLOAD_DEPTH):
        deep_list = [deep_list]
    assert _refusal({"x": deep_list}).startswith("/payload/x/0/0")


def test_properties_and_items_are_bounded() -> None:
    check_payload({str(i): i for i in range(MAX_OBJECT_PROPERTIES)}, "/payload")
    assert _refusal({"inner": {str(i): i for i in range(MAX_OBJECT_PROPERTIES + 1)}}) == "/payload/inner"
    check_payload({"items": list(range(MAX_ARRAY_ITEMS))}, "/payload")
    assert _refusal({"a/b": {"c~d": list(range(MAX_ARRAY_ITEMS + 1))}}) == "/payload/a~1b/c~0d"


def test_limits_apply_to_every_body_format() -> None:
    too_deep = _nested(MAX_PAYLOAD_DEPTH + 1)
    with pytest.raises(ValidationFailed) as caught:
        decode_event(json.dumps({"event_type": "a", "payload": too_deep}).encode(), "native")
    assert caught.value.errors[0].pointer.startswith("/payload/a")
    cloud = {"specversion": "1.0", "id": "1", "source": "/s", "type": "a", "data": too_deep}
    with pytest.raises(ValidationFailed) as caught:
        decode_event(json.dumps(cloud).encode(), "cloudevents")
    assert caught.value.errors[0].pointer.startswith("/data/a")
    batch = {"events": [{"event_type": "a", "payload": {}}, {"event_type": "a", "payload": too_deep}]}
    with pytest.raises(ValidationFailed) as caught:
        decode_batch(json.dumps(batch).encode(), "native", 10)
    assert caught.value.errors[0].pointer.startswith("/events/1/payload/a")
    with pytest.raises(ValidationFailed) as caught:
        decode_batch(json.dumps([cloud]).encode(), "cloudevents-batch", 10)
    assert caught.value.errors[0].pointer.startswith("/0/data/a")


def test_a_very_deep_document_is_a_clear_client_error() -> None:
    body = b'{"event_type": "a", "payload": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001
    with pytest.raises(Problem) as caught:
        decode_event(body, "native")
    assert caught.value.status == 400
