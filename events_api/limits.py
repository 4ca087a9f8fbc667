"""Abuse limits on what a request may carry, beyond its size (MAX_BODY_BYTES) and the field limits of
`models.py`. Each answers with a clear 4xx naming the limit; none is a performance target.

A payload is walked once, iteratively (a deep document cannot exhaust the stack): the walk costs about
a microsecond per value, small beside decoding and validation, and bounds what the validator, the
fingerprint and every consumer downstream have to handle."""

from __future__ import annotations

from typing import Any

from events_api.decoding import escape
from events_api.errors import FieldError, ValidationFailed

MAX_PAYLOAD_DEPTH = 32  # objects and arrays nested in a payload (the payload object itself is level 1)
MAX_OBJECT_PROPERTIES = 1_000  # members of any one object in a payload
MAX_ARRAY_ITEMS = 10_000  # items of any one array in a payload
MAX_REQUEST_HEADER_BYTES = 16_384  # request line and all headers together (→ 431)
MAX_REQUEST_HEADERS = 100  # header fields in one request (→ 431)


def check_payload(payload: Any, pointer: str) -> None:
    """ValidationFailed (422, pointing at the first offending value) when the payload is too deep,
    or an object or array in it too large. The fast pass only counts; pointers are built on failure."""
    stack: list[tuple[Any, int]] = [(payload, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > MAX_PAYLOAD_DEPTH or len(value) > _MAX_SIZE[type(value)]:
            _locate(payload, pointer)
        for child in children:
            if isinstance(child, dict | list):
                push((child, depth + 1))


_MAX_SIZE: dict[type, int] = {dict: MAX_OBJECT_PROPERTIES, list: MAX_ARRAY_ITEMS}


def _locate(payload: Any, pointer: str) -> None:
    """The slow pass, after the fast one found a problem: raise with the pointer of the first one."""
    stack: list[tuple[Any, str, int]] = [(payload, pointer, 1)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, dict):
            children = value.items()
            if len(value) > MAX_OBJECT_PROPERTIES:
                _refuse(where, f"an object may have at most {MAX_OBJECT_PROPERTIES} properties, this has {len(value)}")
        elif isinstance(value, list):
            children = enumerate(value)  # type: ignore[assignment]
            if len(value) > MAX_ARRAY_ITEMS:
                _refuse(where, f"an array may have at most {MAX_ARRAY_ITEMS} items, this has {len(value)}")
        else:
            continue
        if depth > MAX_PAYLOAD_DEPTH:
            _refuse(where, f"the payload may nest objects and arrays at most {MAX_PAYLOAD_DEPTH} levels deep")
        stack.extend(
            (child, f"{where}/{escape(name)}", depth + 1) for name, child in children if isinstance(child, dict | list)
        )


def _refuse(pointer: str, message: str) -> None:
    raise ValidationFailed(f"{message} (at {pointer})", errors=[FieldError(pointer, message)])
