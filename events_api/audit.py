"""Reading the audit log: the platform admin sees every tenant's entries, a tenant key its own.
Entries are written by the stores, in the transaction of each change (storage/audit.py)."""

from __future__ import annotations

import re

from events_api.auth import Caller, TenantCaller
from events_api.errors import BadRequest, Forbidden
from events_api.models import AuditEntryOut, AuditPage
from events_api.storage.audit import AuditStore
from events_api.storage.database import Database

MAX_PAGE = 500
ACTION_PATTERN = r"^[a-z_]+\.[a-z_]+(?!\n)$"
_ACTION = re.compile(ACTION_PATTERN)


class Audit:
    def __init__(self, db: Database) -> None:
        self.store = AuditStore(db)

    async def page(
        self, caller: Caller, *, tenant: str | None, action: str | None, limit: int, cursor: str | None
    ) -> AuditPage:
        if action is not None and not _ACTION.fullmatch(action):
            raise BadRequest("action looks like `api_key.created`")
        if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 19):
            raise BadRequest("cursor must be the next_cursor of a previous page")
        before = None if cursor is None else int(cursor)
        if isinstance(caller, TenantCaller):
            if tenant is not None and tenant != caller.tenant_id:
                raise Forbidden("a tenant API key sees only its own tenant's entries")
            rows = await self.store.tenant_page(caller.tenant_id, action=action, before=before, limit=limit)
        elif tenant is not None:
            rows = await self.store.tenant_page(tenant, action=action, before=before, limit=limit)
        else:
            rows = await self.store.platform_page(action=action, before=before, limit=limit)
        entries = [AuditEntryOut(r.id, r.at, r.tenant_id, r.actor, r.action, r.target, r.details) for r in rows]
        return AuditPage(entries, str(rows[-1].id) if len(rows) == limit else None)
