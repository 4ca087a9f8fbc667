"""The one error hierarchy. Every failure a client can see is a `Problem`, rendered as RFC 9457
`application/problem+json` by the HTTP layer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

PROBLEM_BASE = "https://events-api.dev/problems/"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation failure, located by a JSON Pointer into the request body."""

    pointer: str
    message: str


@dataclass
class Problem(Exception):
    """Base of every client-visible error. Subclasses fix the status, type and title."""

    detail: str
    errors: Sequence[FieldError] = field(default_factory=tuple)
    headers: dict[str, str] = field(default_factory=dict)

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal server error"
    default_headers: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        self.headers = {**self.default_headers, **self.headers}

    def __str__(self) -> str:
        return f"{self.status} {self.title}: {self.detail}"

    @property
    def type(self) -> str:
        return PROBLEM_BASE + self.slug


class BadRequest(Problem):
    status, slug, title = 400, "bad-request", "Bad request"


class InvalidIdempotencyKey(Problem):
    status, slug, title = 400, "invalid-idempotency-key", "Missing or malformed Idempotency-Key"


class Unauthorized(Problem):
    status, slug, title = 401, "unauthorized", "Missing or invalid credentials"
    default_headers: ClassVar[dict[str, str]] = {"WWW-Authenticate": 'Bearer realm="events-api"'}


class Forbidden(Problem):
    status, slug, title = 403, "forbidden", "The API key lacks the required scope"


class NotFound(Problem):
    status, slug, title = 404, "not-found", "Not found"


class Conflict(Problem):
    status, slug, title = 409, "conflict", "Conflict"


class IdempotencyKeyInFlight(Problem):
    status, slug, title = 409, "idempotency-key-in-flight", "A request with this Idempotency-Key is in flight"
    default_headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}


class RequestTimeout(Problem):
    status, slug, title = 408, "request-timeout", "The request was not received in time"
    default_headers: ClassVar[dict[str, str]] = {"Connection": "close"}


class PayloadTooLarge(Problem):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class UnsupportedMediaType(Problem):
    status, slug, title = 415, "unsupported-media-type", "Unsupported media type"


class ValidationFailed(Problem):
    status, slug, title = 422, "validation-failed", "The request is not valid"


class IdempotencyKeyReused(Problem):
    status, slug, title = 422, "idempotency-key-reused", "Idempotency-Key reused with a different request"


class RateLimited(Problem):
    status, slug, title = 429, "rate-limited", "Too many requests"


class RequestHeaderFieldsTooLarge(Problem):
    status, slug, title = 431, "request-header-fields-too-large", "Request header fields too large"


class StorageUnavailable(Problem):
    status, slug, title = 503, "storage-unavailable", "Storage is unavailable; retry later"
    default_headers: ClassVar[dict[str, str]] = {"Retry-After": "1"}
