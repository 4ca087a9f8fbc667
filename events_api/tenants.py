"""Tenants, their API keys, and authenticating a request's bearer token."""

from __future__ import annotations

import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
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
from events_api.models import (
    TENANT_ID_PATTERN,
    ApiKeyCreated,
    ApiKeyIn,
    RateLimitsIn,
    RoutingIn,
    RoutingOut,
    Tenant,
)
from events_api.routing import Routing, validate
from events_api.storage.database import Database
from events_api.storage.platform import PlatformStore, RateLimits, StoredKey

_TENANT_ID = re.compile(TENANT_ID_PATTERN)
_KEY_ID = re.compile(r"key_[0-9a-z]{16}")
KEY_CACHE_SECONDS = 60.0
KEY_CACHE_SIZE = 10_000


def _routing_out(tenant_id: str, routing: Routing) -> RoutingOut:
    return RoutingOut(tenant_id, routing.topic_template, routing.dead_letter_topic, routing.topics, routing.cluster)


def _live(stored: StoredKey, now: datetime) -> bool:
    return stored.revoked_at is None and (stored.expires_at is None or stored.expires_at > now)


class Tenants:
    def __init__(
        self,
        db: Database,
        admin_token: str | None,
        random: RandomBytes = os.urandom,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = PlatformStore(db)
        self.admin_token = admin_token
        self.random = random
        self.monotonic = monotonic
        # key id -> (row, when it was read). Only used where the statement that follows re-checks that
        # the key is live (the publish path), so a cached row can never outlive a revocation.
        self._keys: OrderedDict[str, tuple[StoredKey, float]] = OrderedDict()

    async def authenticate(self, token: str | None, now: datetime, *, cached: bool = False) -> Caller:
        """The caller behind a bearer token. Every failure looks the same to the client.

        `cached=True` may use a key row read up to KEY_CACHE_SECONDS ago: only for callers whose next
        statement checks liveness itself (EventStore.accept)."""
        if token is None:
            raise Unauthorized("send `Authorization: Bearer <API key or admin token>`")
        parsed = parse_token(token)
        if parsed is None:
            if admin_token_matches(token, self.admin_token):
                return PlatformAdmin()
            raise Unauthorized("the bearer token is not valid")
        key_id, secret = parsed
        stored = self._cached_key(key_id) if cached else None
        if stored is None:
            stored = await self.store.load_api_key(key_id)
            if stored is not None:
                self._remember(stored)
        if stored is None or not secret_matches(secret, stored.secret_hash) or not _live(stored, now):
            raise Unauthorized("the API key is not valid, revoked or expired")
        return TenantCaller(stored.tenant_id, key_id, stored.scopes)

    async def confirm(self, caller: TenantCaller, now: datetime) -> None:
        """Re-read the caller's key: Unauthorized if it was revoked or expired since it was cached."""
        stored = await self.store.load_api_key(caller.key_id)
        if stored is None or not _live(stored, now):
            self._keys.pop(caller.key_id, None)
            raise Unauthorized("the API key is not valid, revoked or expired")

    def _cached_key(self, key_id: str) -> StoredKey | None:
        entry = self._keys.get(key_id)
        if entry is None or self.monotonic() - entry[1] > KEY_CACHE_SECONDS:
            return None
        self._keys.move_to_end(key_id)
        return entry[0]

    def _remember(self, stored: StoredKey) -> None:
        self._keys[stored.key_id] = (stored, self.monotonic())
        self._keys.move_to_end(stored.key_id)
        if len(self._keys) > KEY_CACHE_SIZE:
            self._keys.popitem(last=False)

    async def create(self, tenant_id: str, now: datetime, *, actor: str) -> Tenant:
        if not _TENANT_ID.fullmatch(tenant_id):
            raise ValidationFailed(
                f"tenant id must match {TENANT_ID_PATTERN}",
                errors=[FieldError("/id", f"must match {TENANT_ID_PATTERN}")],
            )
        if not await self.store.create_tenant(tenant_id, now, actor=actor):
            raise Conflict(f"tenant {tenant_id!r} already exists")
        return Tenant(tenant_id, now)

    async def create_key(self, tenant_id: str, request: ApiKeyIn, now: datetime, *, actor: str) -> ApiKeyCreated:
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
            actor=actor,
        )
        return ApiKeyCreated(
            issued.key_id, issued.token, tenant_id, request.name, list(scopes), now, request.expires_at
        )

    async def put_routing(self, tenant_id: str, request: RoutingIn, now: datetime, *, actor: str) -> RoutingOut:
        routing = validate(Routing(request.topic_template, request.dead_letter_topic, request.topics, request.cluster))
        await self._require_tenant(tenant_id)
        await self.store.put_routing(tenant_id, routing, now, actor=actor)
        return _routing_out(tenant_id, routing)

    async def get_routing(self, tenant_id: str) -> RoutingOut:
        await self._require_tenant(tenant_id)
        return _routing_out(tenant_id, await self.store.get_routing(tenant_id))

    async def put_rate_limits(self, tenant_id: str, request: RateLimitsIn, now: datetime, *, actor: str) -> RateLimits:
        await self._require_tenant(tenant_id)
        limits = RateLimits(request.events_per_second, request.bytes_per_second)
        await self.store.put_rate_limits(tenant_id, limits, now, actor=actor)
        return limits

    async def get_rate_limits(self, tenant_id: str) -> RateLimits:
        await self._require_tenant(tenant_id)
        return await self.store.get_rate_limits(tenant_id)

    async def revoke_key(self, tenant_id: str, key_id: str, now: datetime, *, actor: str) -> None:
        self._keys.pop(key_id, None)
        if not _TENANT_ID.fullmatch(tenant_id) or not _KEY_ID.fullmatch(key_id):
            raise NotFound(f"tenant {tenant_id[:80]!r} has no API key {key_id[:80]!r}")
        if not await self.store.revoke_api_key(tenant_id, key_id, now, actor=actor):
            raise NotFound(f"tenant {tenant_id!r} has no API key {key_id[:80]!r}")

    async def _require_tenant(self, tenant_id: str) -> None:
        if not _TENANT_ID.fullmatch(tenant_id) or not await self.store.tenant_exists(tenant_id):
            raise NotFound(f"no tenant {tenant_id[:80]!r}")
