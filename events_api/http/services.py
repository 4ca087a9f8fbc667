"""What the handlers need, built once per process by the app factory and reached via the request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from litestar import Request

from events_api.announcements import VersionAnnouncements
from events_api.audit import Audit
from events_api.auth import Caller, PlatformAdmin, Scope, TenantCaller, bearer_token
from events_api.dead_letters import DeadLetters
from events_api.errors import Forbidden, PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from events_api.ingest import Ingest
from events_api.logs import annotate
from events_api.metrics import PlatformMetrics
from events_api.ratelimit import RateLimiter
from events_api.schemas import SchemaRegistry
from events_api.settings import Settings
from events_api.storage.database import Database
from events_api.tenants import Tenants

AnyRequest = Request[Any, Any, Any]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    db: Database
    tenants: Tenants
    registry: SchemaRegistry
    announcements: VersionAnnouncements
    ingest: Ingest
    dead_letters: DeadLetters
    limiter: RateLimiter
    audit: Audit
    platform_metrics: PlatformMetrics
    clock: Callable[[], datetime]


def services(request: AnyRequest) -> Services:
    found: Services = request.app.state.services
    return found


async def authorize_admin(request: AnyRequest) -> PlatformAdmin:
    svc = services(request)
    caller = await svc.tenants.authenticate(bearer_token(request.headers.get("authorization")), svc.clock())
    if not isinstance(caller, PlatformAdmin):
        raise Forbidden("this endpoint needs the platform admin token")
    annotate(request.scope, caller="admin")
    return caller


async def authorize_any(request: AnyRequest) -> Caller:
    """The platform admin or any valid tenant key (for endpoints that show each caller its own part)."""
    svc = services(request)
    caller = await svc.tenants.authenticate(bearer_token(request.headers.get("authorization")), svc.clock())
    if isinstance(caller, TenantCaller):
        annotate(request.scope, tenant=caller.tenant_id, key_id=caller.key_id)
    else:
        annotate(request.scope, caller="admin")
    return caller


async def authorize_tenant(request: AnyRequest, *any_of: Scope, cached: bool = False) -> TenantCaller:
    """The calling tenant key, which must hold one of `any_of` (any valid key when empty).
    `cached` only where the domain call re-checks the key (see Tenants.authenticate)."""
    svc = services(request)
    token = bearer_token(request.headers.get("authorization"))
    caller = await svc.tenants.authenticate(token, svc.clock(), cached=cached)
    if not isinstance(caller, TenantCaller):
        raise Forbidden("this endpoint needs a tenant API key")
    annotate(request.scope, tenant=caller.tenant_id, key_id=caller.key_id)
    if not caller.has_any(any_of):
        raise Forbidden(f"the API key needs the scope {' or '.join(any_of)}")
    return caller


def media_type(request: AnyRequest) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_body(request: AnyRequest, accepted: tuple[str, ...], *, optional: bool = False) -> tuple[str, bytes]:
    """The body and its media type. 415 for a type not in `accepted` (an empty body needs none when
    `optional`); 413 past MAX_BODY_BYTES, decided from Content-Length before reading, and while streaming
    otherwise; 408 when it does not arrive within READ_TIMEOUT (a slow upload holds nothing for long)."""
    settings = services(request).settings
    kind = media_type(request)
    if kind not in accepted and not optional:
        raise UnsupportedMediaType(f"send Content-Type: {' or '.join(accepted)} (got {kind or 'none'!r})")
    length = request.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > settings.max_body_bytes:
        raise PayloadTooLarge(f"the body is {length} bytes; the limit is {settings.max_body_bytes}")
    timeout = settings.read_timeout.total_seconds()
    try:
        async with asyncio.timeout(timeout):
            body = await request.body()
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout:g} s") from None
    if kind not in accepted and body:
        raise UnsupportedMediaType(f"send Content-Type: {' or '.join(accepted)} (got {kind or 'none'!r})")
    return kind, body
