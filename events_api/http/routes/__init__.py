"""Route handlers, one module per resource."""

from __future__ import annotations

from typing import Any

from litestar.openapi.datastructures import ResponseSpec

from events_api.auth import Scope
from events_api.models import Problem

_DESCRIPTIONS = {
    400: "Malformed request (bad JSON, missing or malformed Idempotency-Key)",
    401: "Missing or invalid credentials",
    403: "The credentials lack the required scope",
    404: "Not found (or owned by another tenant)",
    409: "Conflict",
    413: "Body larger than EVENTS_API_MAX_BODY_BYTES",
    408: "The body did not arrive within EVENTS_API_READ_TIMEOUT",
    415: "Unsupported Content-Type",
    429: "Over the tenant's rate limit; retry after `Retry-After` seconds",
    422: "Validation failed; `errors` holds JSON Pointers into the request body",
    503: "Storage unavailable; retry after `Retry-After` seconds",
}


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the problem+json responses an operation can return. An operation that reads a
    body (415) can also time out reading it (408)."""
    if 415 in statuses:
        statuses = tuple(sorted({*statuses, 408}))
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type="application/problem+json",
            description=_DESCRIPTIONS[status],
            generate_examples=False,
        )
        for status in statuses
    }


AUTHED = (400, 401, 403, 503)

# Who may call an operation, declared beside its route (`opt={"auth": ...}`) and published in the OpenAPI
# document as `x-auth`; tests/integration/test_security_matrix.py checks every operation enforces it.
ADMIN: dict[str, Any] = {"admin": True}
# The platform admin, or any key of a tenant (which then sees only its own tenant's part).
ADMIN_OR_TENANT: dict[str, Any] = {"admin": True, "tenant_scopes_any_of": []}


def TENANT(*any_of: Scope) -> dict[str, Any]:
    """A tenant API key holding one of `any_of` (any key of the tenant when empty)."""
    return {"tenant_scopes_any_of": [str(s) for s in any_of]}
