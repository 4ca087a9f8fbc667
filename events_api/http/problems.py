"""Every error response is RFC 9457 problem+json, whichever layer raised it."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Response
from litestar.exceptions import HTTPException

from events_api.errors import PROBLEM_BASE, FieldError, Problem
from events_api.http.services import AnyRequest
from events_api.models import Problem as ProblemBody
from events_api.models import ProblemError

log = logging.getLogger("events_api.http")
PROBLEM_JSON = "application/problem+json"

_SLUGS = {400: "bad-request", 404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}


def render(
    status: int, slug: str, title: str, detail: str, errors: list[FieldError] | None, headers: dict[str, str]
) -> Response[bytes]:
    body = ProblemBody(
        type=PROBLEM_BASE + slug,
        title=title,
        status=status,
        detail=detail,
        errors=[ProblemError(e.pointer, e.message) for e in errors] if errors else None,
    )
    return Response(msgspec.json.encode(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def problem_handler(_: AnyRequest, exc: Problem) -> Response[bytes]:
    return render(exc.status, exc.slug, exc.title, exc.detail, list(exc.errors), exc.headers)


def http_exception_handler(_: AnyRequest, exc: HTTPException) -> Response[bytes]:
    """Litestar's own errors (unknown route, wrong method, bad path/query parameter, body limit)."""
    status = exc.status_code
    headers = dict(exc.headers or {})
    slug = _SLUGS.get(status, "internal-error" if status >= 500 else "bad-request")
    title = HTTPStatus(status).phrase if status < 500 else "Internal server error"
    detail = str(exc.detail) if status < 500 else "the server failed to handle the request"
    errors = None
    extra: Any = exc.extra
    if isinstance(extra, list):
        errors = [FieldError(f"/{e.get('key', '')}", str(e.get("message", ""))) for e in extra if isinstance(e, dict)]
    return render(status, slug, title, detail, errors, headers)


def internal_error_handler(request: AnyRequest, exc: Exception) -> Response[bytes]:
    # The request body may hold customer data: log the route and the exception only.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return render(500, "internal-error", "Internal server error", "the server failed to handle the request", None, {})
