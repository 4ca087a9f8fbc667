"""Platform-level rows: tenants and their API keys. The only queries here that are not scoped to a
tenant are the ones that establish which tenant a caller is (`load_api_key`) or create one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, and_, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert

from events_api.routing import Routing
from events_api.storage.audit import record
from events_api.storage.database import Database
from events_api.storage.tables import api_keys, tenant_rate_limits, tenant_routing, tenants


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Per second; None means the platform default (EVENTS_API_RATE_LIMIT_*), 0 means unlimited."""

    events_per_second: int | None = None
    bytes_per_second: int | None = None


@dataclass(frozen=True, slots=True)
class StoredKey:
    key_id: str
    tenant_id: str
    scopes: frozenset[str]
    secret_hash: bytes
    expires_at: datetime | None
    revoked_at: datetime | None


class PlatformStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tenant(self, tenant_id: str, now: datetime, *, actor: str) -> bool:
        """create_tenant: insert a tenant; False when the id is taken."""
        stmt = (
            pg_insert(tenants)
            .values(id=tenant_id, created_at=now)
            .on_conflict_do_nothing(index_elements=[tenants.c.id])
            .returning(tenants.c.id)
        )
        async with self.db.transaction() as conn:
            if (await conn.execute(stmt)).first() is None:
                return False
            await record(conn, tenant_id=tenant_id, actor=actor, action="tenant.created", at=now)
            return True

    async def tenant_exists(self, tenant_id: str) -> bool:
        """tenant_exists: is there a tenant with this id."""
        async with self.db.autocommit() as conn:
            row = await conn.execute(select(func.count()).where(tenants.c.id == tenant_id))
            return bool(row.scalar_one())

    async def create_api_key(
        self,
        tenant_id: str,
        *,
        key_id: str,
        name: str,
        scopes: Sequence[str],
        secret_hash: bytes,
        now: datetime,
        expires_at: datetime | None,
        actor: str,
    ) -> None:
        """create_api_key: store a new key's hash for a tenant."""
        stmt = insert(api_keys).values(
            id=key_id,
            tenant_id=tenant_id,
            name=name,
            scopes=list(scopes),
            secret_hash=secret_hash,
            created_at=now,
            expires_at=expires_at,
        )
        details = {"name": name, "scopes": list(scopes), "expires_at": None if expires_at is None else str(expires_at)}
        async with self.db.transaction() as conn:
            await conn.execute(stmt)
            await record(
                conn, tenant_id=tenant_id, actor=actor, action="api_key.created", at=now, target=key_id, details=details
            )

    async def revoke_api_key(self, tenant_id: str, key_id: str, now: datetime, *, actor: str) -> bool:
        """revoke_api_key: mark a tenant's key revoked; False when the tenant has no such key."""
        stmt = (
            update(api_keys)
            .where(and_(api_keys.c.tenant_id == tenant_id, api_keys.c.id == key_id))
            .values(revoked_at=func.coalesce(api_keys.c.revoked_at, now))
            .returning(api_keys.c.id)
        )
        async with self.db.transaction() as conn:
            if (await conn.execute(stmt)).first() is None:
                return False
            await record(conn, tenant_id=tenant_id, actor=actor, action="api_key.revoked", at=now, target=key_id)
            return True

    async def load_api_key(self, key_id: str) -> StoredKey | None:
        """load_api_key: the key row that authenticates a request (this decides the tenant)."""
        stmt = select(
            api_keys.c.tenant_id,
            api_keys.c.scopes,
            api_keys.c.secret_hash,
            api_keys.c.expires_at,
            api_keys.c.revoked_at,
        ).where(api_keys.c.id == key_id)
        async with self.db.autocommit() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return StoredKey(
            key_id=key_id,
            tenant_id=row.tenant_id,
            scopes=frozenset(row.scopes),
            secret_hash=bytes(row.secret_hash),
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
        )

    async def put_routing(self, tenant_id: str, routing: Routing, now: datetime, *, actor: str) -> None:
        """put_routing: set a tenant's routing (insert or replace)."""
        values = {
            "topic_template": routing.topic_template,
            "dead_letter_topic": routing.dead_letter_topic,
            "topics": routing.topics,
            "cluster": routing.cluster,
        }
        await self._put_setting(tenant_routing, tenant_id, values, "routing.updated", now, actor)

    async def get_routing(self, tenant_id: str) -> Routing:
        """get_routing: a tenant's routing, or the defaults when it never set one."""
        stmt = select(
            tenant_routing.c.topic_template,
            tenant_routing.c.dead_letter_topic,
            tenant_routing.c.topics,
            tenant_routing.c.cluster,
        ).where(tenant_routing.c.tenant_id == tenant_id)
        async with self.db.autocommit() as conn:
            row = (await conn.execute(stmt)).first()
        return Routing() if row is None else Routing(row[0], row[1], dict(row[2]), row[3])

    async def put_rate_limits(self, tenant_id: str, limits: RateLimits, now: datetime, *, actor: str) -> None:
        """put_rate_limits: set a tenant's ingest rate limits (None: the default)."""
        values = {"events_per_second": limits.events_per_second, "bytes_per_second": limits.bytes_per_second}
        await self._put_setting(tenant_rate_limits, tenant_id, values, "rate_limits.updated", now, actor)

    async def _put_setting(
        self, table: Table, tenant_id: str, values: dict[str, Any], action: str, now: datetime, actor: str
    ) -> None:
        """A tenant's row of a per-tenant settings table, inserted or replaced, and its audit entry."""
        stmt = pg_insert(table).values(tenant_id=tenant_id, updated_at=now, **values)
        stmt = stmt.on_conflict_do_update(index_elements=[table.c.tenant_id], set_={**values, "updated_at": now})
        async with self.db.transaction() as conn:
            await conn.execute(stmt)
            await record(conn, tenant_id=tenant_id, actor=actor, action=action, at=now, details=values)

    async def get_rate_limits(self, tenant_id: str) -> RateLimits:
        """get_rate_limits: a tenant's own limits (None where it uses the default)."""
        stmt = select(tenant_rate_limits.c.events_per_second, tenant_rate_limits.c.bytes_per_second).where(
            tenant_rate_limits.c.tenant_id == tenant_id
        )
        async with self.db.autocommit() as conn:
            row = (await conn.execute(stmt)).first()
        return RateLimits() if row is None else RateLimits(row[0], row[1])
