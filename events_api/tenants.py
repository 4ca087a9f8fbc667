"""Tenants, their API keys, and authenticating a request's bearer token."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import datetime

from events_api.auth import (
    Caller,
    PlatformAdmin,
    TenantCaller,
    admin_token_matches,
    issue_key,
    parse_token,
    secret_matches,
)
from events_api.errors import Conflict, FieldError, NotFound, Unauthorized, ValidationFailed
from events_api.ids import RandomBytes
from events_api.models import TENANT_ID_PATTERN, ApiKeyCreated, ApiKeyIn, Tenant
from events_api.storage.database import Database
from events_api.storage.platform import PlatformStore

_TENANT_ID = re.compile(TENANT_ID_PATTERN)


class Tenants:
    def __init__(self, db: Database, admin_token: str | None, random: RandomBytes = os.urandom) -> None:
        self.store = PlatformStore(db)
        self.admin_token = admin_token
        self.random = random

    async def authenticate(self, token: str | None, now: datetime) -> Caller:
        """The caller behind a bearer token. Every failure looks the same to the client."""
        if token is None:
            raise Unauthorized("send `Authorization: Bearer <API key or admin token>`")
        parsed = parse_token(token)
        if parsed is None:
            if admin_token_matches(token, self.admin_token):
                return PlatformAdmin()
            raise Unauthorized("the bearer token is not valid")
        key_id, secret = parsed
        stored = await self.store.load_api_key(key_id)
        if (
            stored is None
            or not secret_matches(secret, stored.secret_hash)
            or stored.revoked_at is not None
            or (stored.expires_at is not None and stored.expires_at <= now)
        ):
            raise Unauthorized("the API key is not valid, revoked or expired")
        return TenantCaller(stored.tenant_id, key_id, stored.scopes)

    async def create(self, tenant_id: str, now: datetime) -> Tenant:
        if not _TENANT_ID.fullmatch(tenant_id):
            raise ValidationFailed(
                f"tenant id must match {TENANT_ID_PATTERN}",
                errors=[FieldError("/id", f"must match {TENANT_ID_PATTERN}")],
            )
        if not await self.store.create_tenant(tenant_id, now):
            raise Conflict(f"tenant {tenant_id!r} already exists")
        return Tenant(tenant_id, now)

    async def create_key(self, tenant_id: str, request: ApiKeyIn, now: datetime) -> ApiKeyCreated:
        if request.expires_at is not None and request.expires_at <= now:
            raise ValidationFailed(
                "expires_at is in the past", errors=[FieldError("/expires_at", "must be in the future")]
            )
        await self._require_tenant(tenant_id)
        scopes: Sequence[str] = sorted(set(request.scopes))
        issued = issue_key(self.random)
        await self.store.create_api_key(
            tenant_id,
            key_id=issued.key_id,
            name=request.name,
            scopes=scopes,
            secret_hash=issued.secret_hash,
            now=now,
            expires_at=request.expires_at,
        )
        return ApiKeyCreated(
            issued.key_id, issued.token, tenant_id, request.name, list(scopes), now, request.expires_at
        )

    async def revoke_key(self, tenant_id: str, key_id: str, now: datetime) -> None:
        if not await self.store.revoke_api_key(tenant_id, key_id, now):
            raise NotFound(f"tenant {tenant_id!r} has no API key {key_id[:80]!r}")

    async def _require_tenant(self, tenant_id: str) -> None:
        if not await self.store.tenant_exists(tenant_id):
            raise NotFound(f"no tenant {tenant_id[:80]!r}")
