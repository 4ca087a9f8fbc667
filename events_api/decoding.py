"""Request bodies to structs. A body that is not JSON is a 400; JSON of the wrong shape is a 422
whose error points (JSON Pointer) at the offending member."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from events_api.errors import BadRequest, FieldError, ValidationFailed

T = TypeVar("T")

_PATH = re.compile(r" - at (?:`key` in )?`\$(.*)`$")  # "in": the error is in a key of that object
_FIELD = re.compile(r"(?:missing required|contains unknown) field `([^`]+)`")
_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def escape(part: str | int) -> str:
    """One JSON Pointer reference token (RFC 6901)."""
    return str(part).replace("~", "~0").replace("/", "~1")


def field_error(error: msgspec.ValidationError) -> FieldError:
    """msgspec's `... - at `$.events[3].payload`` as a JSON Pointer `/events/3/payload`."""
    message = str(error)
    pointer = ""
    match = _PATH.search(message)
    if match:
        for part in _PART.finditer(match.group(1)):
            if part.group(0) == "[...]":  # a dict key msgspec does not name
                break
            pointer += "/" + escape(part.group(1) or part.group(2))
        message = message[: match.start()]
    named = _FIELD.search(message)
    if named:
        pointer += "/" + escape(named.group(1))
    return FieldError(pointer, message)


def decode_body(body: bytes, type_: type[T]) -> T:
    try:
        result: T = msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        error = field_error(exc)
        raise ValidationFailed(f"{error.message} at {error.pointer or '/'}", errors=[error]) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("the body's JSON is nested too deeply") from None
    return result
