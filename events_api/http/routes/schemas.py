"""Schema registry endpoints (tenant keys; writes need `schemas:write`)."""

from __future__ import annotations

from litestar import get, post
from litestar.params import FromPath
from litestar.response import Response

from events_api.auth import Scope
from events_api.decoding import decode_body
from events_api.errors import NotFound
from events_api.http.routes import AUTHED, problems
from events_api.http.services import AnyRequest, authorize_tenant, read_body, services
from events_api.models import SchemaIn, SchemaRegistered, SchemaVersionOut


@post(
    "/v1/schemas/{event_type:str}/versions",
    tags=["schemas"],
    summary="Register a JSON Schema as the next version of an event type",
    description="201 with the new version; 200 with the existing version when an identical schema is registered.",
    status_code=201,
    responses=problems(*AUTHED, 409, 415, 422),
    opt={"request_body": SchemaIn},
)
async def register_schema(request: AnyRequest, event_type: FromPath[str]) -> Response[SchemaRegistered]:
    caller = await authorize_tenant(request, Scope.SCHEMAS_WRITE)
    _, body = await read_body(request, ("application/json",))
    svc = services(request)
    registration = await svc.registry.register(
        caller.tenant_id,
        event_type,
        decode_body(body, SchemaIn).schema,
        now=svc.clock(),
        created_by=caller.key_id,
    )
    return Response(
        SchemaRegistered(event_type, registration.version, registration.compatibility),
        status_code=201 if registration.created else 200,
    )


@get(
    "/v1/schemas/{event_type:str}/versions/{version:str}",
    tags=["schemas"],
    summary="Get one version of an event type's schema (`latest` for the newest)",
    responses=problems(*AUTHED, 404, 422),
)
async def get_schema_version(
    request: AnyRequest, event_type: FromPath[str], version: FromPath[str]
) -> SchemaVersionOut:
    caller = await authorize_tenant(request)
    if version != "latest" and not (version.isdigit() and 0 < int(version) < 2**31):
        raise NotFound(f"version must be a positive integer or `latest`, not {version[:40]!r}")
    found = await services(request).registry.get(
        caller.tenant_id, event_type, None if version == "latest" else int(version)
    )
    return SchemaVersionOut(
        event_type, found.version, found.schema, found.compatibility, found.created_at, found.created_by
    )
