"""The one error hierarchy of the client: every failed call raises an `EventsApiError` subclass, built from
the API's RFC 9457 problem+json body, or from the transport error when no answer came back.

Catch `EventsApiError` for everything; catch a subclass to react to one cause. `retriable` says whether
the same call may succeed later (the client already retried it within its budget), and for publishes
`idempotency_key` and `outcome_unknown` tell whether the event may have been stored anyway: when
`outcome_unknown` is true, ask `client.check_landed(error.idempotency_key)`, or publish again with that
same key, which can never store the event twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class FieldError:
    """One invalid member of the request, located by a JSON Pointer into the body (`/payload/amount`)."""

    pointer: str
    message: str


class EventsApiError(Exception):
    """A call to the Events API failed. Fields follow RFC 9457; `status` is None when no response came."""

    def __init__(
        self,
        status: int | None,
        type: str,  # the RFC 9457 member name
        title: str,
        detail: str,
        errors: list[FieldError] | None = None,
        *,
        retry_after: float | None = None,
        retriable: bool = False,
        idempotency_key: str | None = None,
        outcome_unknown: bool = False,
        attempts: int = 1,
    ) -> None:
        super().__init__(f"{status or 'no response'} {title}: {detail}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors: list[FieldError] = errors or []
        self.retry_after = retry_after
        #: The same call may succeed later; set by the retry machinery after classifying the failure.
        self.retriable = retriable
        #: The key the call was sent with (publishes only): reuse it to repeat the call safely.
        self.idempotency_key = idempotency_key
        #: Some attempt may have reached the server and stored the event before the answer was lost.
        self.outcome_unknown = outcome_unknown
        self.attempts = attempts


class BadRequestError(EventsApiError):
    """400: the request is malformed (e.g. an Idempotency-Key that is not 1-255 printable ASCII)."""


class AuthenticationError(EventsApiError):
    """401: the API key is missing, unknown, expired or revoked."""


class PermissionDeniedError(EventsApiError):
    """403: the API key is valid but lacks the scope this call needs."""


class NotFoundError(EventsApiError):
    """404: no such resource for this tenant (another tenant's resources are reported the same way)."""


class ConflictError(EventsApiError):
    """409: a request with this Idempotency-Key is still in flight (retried automatically), or a schema
    is incompatible with the event type's compatibility mode (`errors` names each incompatibility)."""


class ValidationError(EventsApiError):
    """422: the request is invalid; `errors` points at each invalid member (`/events/3/payload/amount`).
    Also raised when an Idempotency-Key is reused with a different body (`type` ends in
    `idempotency-key-reused`)."""


class RateLimitedError(EventsApiError):
    """429: too many requests; `retry_after` says how many seconds to wait."""


class UnavailableError(EventsApiError):
    """5xx, 408, a connection failure or a timeout: the API could not be reached or could not store the call.
    Check `outcome_unknown` before giving up on a publish."""


_BY_STATUS: dict[int, type[EventsApiError]] = {
    400: BadRequestError,
    408: UnavailableError,  # the body did not reach the server in time: transient, like a timeout
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: ValidationError,
    429: RateLimitedError,
}


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` in delta-seconds (the form this API sends); an HTTP date or junk is ignored."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds < 86_400 else None


def error_from_response(response: httpx.Response) -> EventsApiError:
    """The typed error for an unsuccessful response; tolerant of bodies that are not problem+json
    (a proxy's HTML page), since the front of the API is not always the API."""
    status = response.status_code
    problem = _problem_members(response)
    cls = _BY_STATUS.get(status, UnavailableError if status >= 500 else EventsApiError)
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "HTTP error"
    return cls(
        status,
        str(problem.get("type", "about:blank")),
        str(problem.get("title", phrase)),
        str(problem.get("detail", response.text[:200] if not problem else "")),
        _field_errors(problem.get("errors")),
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )


def error_from_transport(exc: httpx.TransportError) -> UnavailableError:
    detail = str(exc) or type(exc).__name__
    return UnavailableError(
        None, "about:blank", "The Events API could not be reached", f"{type(exc).__name__}: {detail}"
    )


def _problem_members(response: httpx.Response) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _field_errors(raw: Any) -> list[FieldError]:
    if not isinstance(raw, list):
        return []
    return [
        FieldError(str(item.get("pointer", "")), str(item.get("message", ""))) for item in raw if isinstance(item, dict)
    ]
