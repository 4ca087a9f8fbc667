"""Property-based fuzz of the request decoder: whatever bytes arrive, decoding either yields events or
raises a client error (400/422), and every 422 pointer names a place that exists in the body."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from events_api.errors import BadRequest, ValidationFailed
from events_api.ingest import BodyFormat, decode_batch, decode_event

MAX_EVENTS = 5
FORMATS: list[BodyFormat] = ["native", "cloudevents", "cloudevents-batch"]

# JSON has no NaN or Infinity, and a lone surrogate is not Unicode: json.dumps would write what no JSON
# parser must accept (those are covered by the arbitrary-bytes test below).
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)
# Field names that the decoder knows, so the fuzz reaches past "unknown field" into each field's rules.
NATIVE_FIELDS = ["event_type", "payload", "partition_key", "schema_version", "occurred_at", "headers"]
CLOUD_FIELDS = ["specversion", "id", "source", "type", "data", "partitionkey", "time", "schemaversion", "subject"]
field_values = (
    json_values
    | st.sampled_from(["order.created", "a", "2026-01-01T00:00:00Z", "1.0", "", "\x00", "9bad", "-1"])
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.dictionaries(texts, texts, max_size=3)
)


def _event(fields: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(fields) | texts, field_values, max_size=len(fields) + 1)


documents = (
    _event(NATIVE_FIELDS)
    | _event(CLOUD_FIELDS)
    | st.fixed_dictionaries({"events": st.lists(_event(NATIVE_FIELDS), max_size=MAX_EVENTS + 1)})
    | st.lists(_event(CLOUD_FIELDS), max_size=MAX_EVENTS + 1)
    | json_values
)


def _resolves(document: Any, pointer: str) -> bool:
    """Whether every reference token but the last exists (the last may name a missing member)."""
    if pointer == "":
        return True
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return isinstance(node, dict | list)


def _decode(body: bytes, body_format: BodyFormat) -> None:
    if body_format == "cloudevents-batch" or (body_format == "native" and body.lstrip().startswith(b'{"events"')):
        decode_batch(body, body_format, MAX_EVENTS)
    else:
        decode_event(body, body_format)


@settings(max_examples=300, deadline=None)
@given(document=documents, body_format=st.sampled_from(FORMATS))
def test_json_bodies_decode_or_fail_with_pointers_into_the_body(document: Any, body_format: BodyFormat) -> None:
    body = json.dumps(document).encode()
    errors: list[Any] = []
    try:
        _decode(body, body_format)
    except ValidationFailed as refused:
        errors = list(refused.errors) or ["a 422 lists what is wrong"]
    for error in errors:
        assert _resolves(document, error.pointer), (error, document)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200) | st.text(max_size=200).map(str.encode), body_format=st.sampled_from(FORMATS))
def test_arbitrary_bytes_are_a_client_error_at_worst(body: bytes, body_format: BodyFormat) -> None:
    with contextlib.suppress(BadRequest, ValidationFailed):
        _decode(body, body_format)
