"""The audit log: every admin and schema change, written by the store that makes the change, in the
same transaction (a change is never without its entry, nor an entry without its change)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from events_api.storage.database import Database
from events_api.storage.tables import audit_log


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime
    tenant_id: str
    actor: str
    action: str
    target: str | None
    details: dict[str, Any] | None


async def record(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    actor: str,
    action: str,
    at: datetime,
    target: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """record_audit_entry: called inside the transaction of the change it records."""
    await conn.execute(
        insert(audit_log).values(at=at, tenant_id=tenant_id, actor=actor, action=action, target=target, details=details)
    )


class AuditStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def tenant_page(
        self, tenant_id: str, *, action: str | None, before: int | None, limit: int
    ) -> list[AuditEntry]:
        """audit_page_of_tenant: one tenant's entries, newest first."""
        return await self._page(select(*audit_log.c).where(audit_log.c.tenant_id == tenant_id), action, before, limit)

    async def platform_page(self, *, action: str | None, before: int | None, limit: int) -> list[AuditEntry]:
        """audit_page_of_platform: every tenant's entries, newest first (platform admin only)."""
        return await self._page(select(*audit_log.c), action, before, limit)

    async def _page(self, stmt: Select[Any], action: str | None, before: int | None, limit: int) -> list[AuditEntry]:
        if action is not None:
            stmt = stmt.where(audit_log.c.action == action)
        if before is not None:
            stmt = stmt.where(audit_log.c.id < before)
        async with self.db.autocommit() as conn:
            rows = await conn.execute(stmt.order_by(audit_log.c.id.desc()).limit(limit))
            return [AuditEntry(*row) for row in rows]
