"""The audit log of admin and schema changes."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import QueryParameter

from events_api.audit import ACTION_PATTERN, MAX_PAGE
from events_api.http.routes import ADMIN_OR_TENANT, AUTHED, problems
from events_api.http.services import AnyRequest, authorize_any, services
from events_api.models import TENANT_ID_PATTERN, AuditPage


@get(
    "/v1/audit",
    tags=["admin"],
    summary="Audit log of admin and schema changes, newest first",
    description="Tenants, API keys, routing, rate limits, schema versions, compatibility modes and redrives, "
    "each with the key id (or `admin`) that made the change. The platform admin sees every tenant (or one, "
    "with `tenant`); a tenant API key with any scope sees its own tenant's entries.",
    responses=problems(*AUTHED),
    opt={"auth": ADMIN_OR_TENANT},
)
async def list_audit_entries(
    request: AnyRequest,
    tenant: Annotated[str | None, QueryParameter(pattern=TENANT_ID_PATTERN, description="Admin only")] = None,
    action: Annotated[str | None, QueryParameter(pattern=ACTION_PATTERN)] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[
        str | None, QueryParameter(pattern=r"^[0-9]{1,18}$", description="`next_cursor` of the previous page")
    ] = None,
) -> AuditPage:
    svc = services(request)
    caller = await authorize_any(request)
    return await svc.audit.page(caller, tenant=tenant, action=action, limit=limit, cursor=cursor)
