"""Platform admin: tenants and their API keys."""

from __future__ import annotations

from litestar import delete, get, post, put
from litestar.params import FromPath

from events_api.decoding import decode_body
from events_api.http.routes import ADMIN, problems
from events_api.http.services import AnyRequest, authorize_admin, read_body, services
from events_api.models import (
    ApiKeyCreated,
    ApiKeyIn,
    RateLimitsIn,
    RateLimitsOut,
    RoutingIn,
    RoutingOut,
    Tenant,
    TenantIn,
)
from events_api.storage.platform import RateLimits

ADMIN_ERRORS = (400, 401, 403, 415, 422, 503)


@post(
    "/v1/tenants",
    tags=["admin"],
    summary="Create a tenant",
    status_code=201,
    responses=problems(*ADMIN_ERRORS, 409),
    opt={"auth": ADMIN, "request_body": TenantIn},
)
async def create_tenant(request: AnyRequest) -> Tenant:
    admin = await authorize_admin(request)
    _, body = await read_body(request, ("application/json",))
    svc = services(request)
    return await svc.tenants.create(decode_body(body, TenantIn).id, svc.clock(), actor=admin.actor)


@post(
    "/v1/tenants/{tenant:str}/api-keys",
    tags=["admin"],
    summary="Create an API key for a tenant (the key is shown only in this response)",
    status_code=201,
    responses=problems(*ADMIN_ERRORS, 404),
    opt={"auth": ADMIN, "request_body": ApiKeyIn},
)
async def create_api_key(request: AnyRequest, tenant: FromPath[str]) -> ApiKeyCreated:
    admin = await authorize_admin(request)
    _, body = await read_body(request, ("application/json",))
    svc = services(request)
    return await svc.tenants.create_key(tenant, decode_body(body, ApiKeyIn), svc.clock(), actor=admin.actor)


@delete(
    "/v1/tenants/{tenant:str}/api-keys/{key_id:str}",
    tags=["admin"],
    summary="Revoke an API key; it is refused at once",
    status_code=204,
    responses=problems(400, 401, 403, 404, 503),
    opt={"auth": ADMIN},
)
async def revoke_api_key(request: AnyRequest, tenant: FromPath[str], key_id: FromPath[str]) -> None:
    admin = await authorize_admin(request)
    svc = services(request)
    await svc.tenants.revoke_key(tenant, key_id, svc.clock(), actor=admin.actor)


@put(
    "/v1/tenants/{tenant:str}/routing",
    tags=["admin"],
    summary="Set where a tenant's events go: topic template, per-type topics, dead-letter topic, cluster",
    description="Omitted fields take their defaults. The relay picks a change up within a few seconds.",
    responses=problems(*ADMIN_ERRORS, 404),
    opt={"auth": ADMIN, "request_body": RoutingIn},
)
async def put_routing(request: AnyRequest, tenant: FromPath[str]) -> RoutingOut:
    admin = await authorize_admin(request)
    _, body = await read_body(request, ("application/json",))
    svc = services(request)
    return await svc.tenants.put_routing(tenant, decode_body(body, RoutingIn), svc.clock(), actor=admin.actor)


@get(
    "/v1/tenants/{tenant:str}/routing",
    tags=["admin"],
    summary="Where a tenant's events go (the defaults until it is set)",
    responses=problems(400, 401, 403, 404, 503),
    opt={"auth": ADMIN},
)
async def get_routing(request: AnyRequest, tenant: FromPath[str]) -> RoutingOut:
    await authorize_admin(request)
    return await services(request).tenants.get_routing(tenant)


def _rate_limits_out(request: AnyRequest, tenant: str, limits: RateLimits) -> RateLimitsOut:
    effective = services(request).limiter.effective(limits)
    return RateLimitsOut(
        tenant,
        limits.events_per_second,
        limits.bytes_per_second,
        effective.events_per_second,
        effective.bytes_per_second,
    )


@put(
    "/v1/tenants/{tenant:str}/rate-limits",
    tags=["admin"],
    summary="Set a tenant's ingest rate limits (events/s and bytes/s; null: the platform default)",
    description="Enforced with token buckets in Redis shared by every replica; over the limit, publishing "
    "answers 429 with Retry-After. Every replica applies a change within 5 seconds.",
    responses=problems(*ADMIN_ERRORS, 404),
    opt={"auth": ADMIN, "request_body": RateLimitsIn},
)
async def put_rate_limits(request: AnyRequest, tenant: FromPath[str]) -> RateLimitsOut:
    admin = await authorize_admin(request)
    _, body = await read_body(request, ("application/json",))
    svc = services(request)
    limits = await svc.tenants.put_rate_limits(tenant, decode_body(body, RateLimitsIn), svc.clock(), actor=admin.actor)
    svc.limiter.forget(tenant)
    return _rate_limits_out(request, tenant, limits)


@get(
    "/v1/tenants/{tenant:str}/rate-limits",
    tags=["admin"],
    summary="A tenant's ingest rate limits, as set and as they apply",
    responses=problems(400, 401, 403, 404, 503),
    opt={"auth": ADMIN},
)
async def get_rate_limits(request: AnyRequest, tenant: FromPath[str]) -> RateLimitsOut:
    await authorize_admin(request)
    return _rate_limits_out(request, tenant, await services(request).tenants.get_rate_limits(tenant))
