"""What the handlers need, built once per process by the app factory and reached via the request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from litestar import Request

from events_api.announcements import VersionAnnouncements
from events_api.auth import PlatformAdmin, Scope, TenantCaller, bearer_token
from events_api.dead_letters import DeadLetters
from events_api.errors import Forbidden, PayloadTooLarge, UnsupportedMediaType
from events_api.ingest import Ingest
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
    clock: Callable[[], datetime]


def services(request: AnyRequest) -> Services:
    found: Services = request.app.state.services
    return found


async def authorize_admin(request: AnyRequest) -> None:
    svc = services(request)
    caller = await svc.tenants.authenticate(bearer_token(request.headers.get("authorization")), svc.clock())
    if not isinstance(caller, PlatformAdmin):
        raise Forbidden("this endpoint needs the platform admin token")


async def authorize_tenant(request: AnyRequest, *any_of: Scope, cached: bool = False) -> TenantCaller:
    """The calling tenant key, which must hold one of `any_of` (any valid key when empty).
    `cached` only where the domain call re-checks the key (see Tenants.authenticate)."""
    svc = services(request)
    token = bearer_token(request.headers.get("authorization"))
    caller = await svc.tenants.authenticate(token, svc.clock(), cached=cached)
    if not isinstance(caller, TenantCaller):
        raise Forbidden("this endpoint needs a tenant API key")
    if not caller.has_any(any_of):
        raise Forbidden(f"the API key needs the scope {' or '.join(any_of)}")
    return caller


def media_type(request: AnyRequest) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def read_body(request: AnyRequest, accepted: tuple[str, ...]) -> tuple[str, bytes]:
    """The body and its media type. 415 for a type not in `accepted`; 413 past MAX_BODY_BYTES,
    decided from Content-Length before reading, and while streaming otherwise."""
    kind = media_type(request)
    if kind not in accepted:
        raise UnsupportedMediaType(f"send Content-Type: {' or '.join(accepted)} (got {kind or 'none'!r})")
    limit = services(request).settings.max_body_bytes
    length = request.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"the body is {length} bytes; the limit is {limit}")
    return kind, await request.body()
