"""Schema registry endpoints (tenant keys; writes need `schemas:write`)."""

from __future__ import annotations

from litestar import get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath
from litestar.response import Response

from events_api.auth import Scope
from events_api.decoding import decode_body
from events_api.errors import NotFound
from events_api.http.routes import AUTHED, TENANT, problems
from events_api.http.services import AnyRequest, authorize_tenant, read_body, services
from events_api.models import (
    CompatibilityCheckOut,
    CompatibilityFinding,
    CompatibilityIn,
    CompatibilityOut,
    EventTypeList,
    EventTypeOut,
    SchemaIn,
    SchemaRegistered,
    SchemaVersionOut,
    VersionList,
    VersionOut,
)


@post(
    "/v1/schemas/{event_type:str}/versions",
    tags=["schemas"],
    summary="Register a JSON Schema as the next version of an event type",
    description="201 with the new version; 200 with the existing version when an identical schema is registered; "
    "409 when it breaks the type's compatibility mode (each incompatibility in `errors`, pointing into `/schema`).",
    status_code=201,
    responses={
        200: ResponseSpec(
            data_container=SchemaRegistered,
            description="Identical to an existing version: that version, nothing new stored",
            generate_examples=False,
        ),
        **problems(*AUTHED, 409, 415, 422),
    },
    opt={"auth": TENANT(Scope.SCHEMAS_WRITE), "request_body": SchemaIn},
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
        created_by=caller.actor,
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
    opt={"auth": TENANT()},
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


@get(
    "/v1/schemas",
    tags=["schemas"],
    summary="The tenant's event types, with their compatibility mode and latest version",
    responses=problems(*AUTHED),
    opt={"auth": TENANT()},
)
async def list_event_types(request: AnyRequest) -> EventTypeList:
    caller = await authorize_tenant(request)
    types = await services(request).registry.list_types(caller.tenant_id)
    return EventTypeList([EventTypeOut(t.event_type, t.compatibility, t.latest_version, t.created_at) for t in types])


@get(
    "/v1/schemas/{event_type:str}/versions",
    tags=["schemas"],
    summary="The versions of an event type, oldest first, with when and by which key each was registered",
    responses=problems(*AUTHED, 404, 422),
    opt={"auth": TENANT()},
)
async def list_schema_versions(request: AnyRequest, event_type: FromPath[str]) -> VersionList:
    caller = await authorize_tenant(request)
    versions = await services(request).registry.list_versions(caller.tenant_id, event_type)
    return VersionList(event_type, [VersionOut(v.version, v.created_at, v.created_by) for v in versions])


@put(
    "/v1/schemas/{event_type:str}/compatibility",
    tags=["schemas"],
    summary="Set the compatibility mode that new versions of an event type must satisfy",
    responses=problems(*AUTHED, 404, 415, 422),
    opt={"auth": TENANT(Scope.SCHEMAS_WRITE), "request_body": CompatibilityIn},
)
async def set_compatibility(request: AnyRequest, event_type: FromPath[str]) -> CompatibilityOut:
    caller = await authorize_tenant(request, Scope.SCHEMAS_WRITE)
    _, body = await read_body(request, ("application/json",))
    mode = decode_body(body, CompatibilityIn).compatibility
    svc = services(request)
    await svc.registry.set_compatibility(caller.tenant_id, event_type, mode, svc.clock(), actor=caller.actor)
    return CompatibilityOut(event_type, mode)


@post(
    "/v1/schemas/{event_type:str}/compatibility-check",
    tags=["schemas"],
    summary="Would this schema be accepted as the next version? Nothing is stored",
    status_code=200,
    responses=problems(*AUTHED, 415, 422),
    opt={"auth": TENANT(), "request_body": SchemaIn},
)
async def check_compatibility(request: AnyRequest, event_type: FromPath[str]) -> CompatibilityCheckOut:
    caller = await authorize_tenant(request)
    _, body = await read_body(request, ("application/json",))
    schema = decode_body(body, SchemaIn).schema
    report = await services(request).registry.check(caller.tenant_id, event_type, schema)
    return CompatibilityCheckOut(
        compatible=report.compatible,
        messages=[f.message for f in report.findings],
        findings=[
            CompatibilityFinding(f.path, f.rule, f.direction, f.message, f.undecidable, f.against_version)  # type: ignore[arg-type]
            for f in report.findings
        ],
    )
