"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio

from litestar import get
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import Response

from events_api.errors import StorageUnavailable
from events_api.http.routes import problems
from events_api.http.services import AnyRequest, services
from events_api.metrics import CONTENT_TYPE, exposition
from events_api.models import Health
from events_api.storage.health import schema_revision
from events_api.storage.migrate import head_revision, schema_is_current


@get("/healthz", tags=["operations"], summary="The process is alive", security=[{}])
async def healthz() -> Health:
    return Health("ok")


@get(
    "/readyz",
    tags=["operations"],
    summary="The database is reachable and migrated",
    security=[{}],
    responses=problems(503),
)
async def readyz(request: AnyRequest) -> Response[Health]:
    try:
        revision = await schema_revision(services(request).db)
    except StorageUnavailable as exc:
        raise StorageUnavailable("the database is unreachable") from exc
    # Upgrades run migrations before code (docs/operations.md): a build stays ready on a newer schema.
    if not schema_is_current(revision, head_revision()):
        raise StorageUnavailable(
            f"the database schema is at {revision or 'nothing'}, this build needs {head_revision()}"
        )
    return Response(Health("ready", {"database": "ok", "migrations": str(revision)}))


@get(
    "/metrics",
    tags=["operations"],
    summary="Prometheus metrics",
    description="The Prometheus text format (0.0.4): requests and their latency by route, events accepted per "
    "tenant, rate limiting, and from the database the backlog, the age of its oldest event, dead letters, "
    "partitions, relays and their lanes and the relays' delivery counts. Unauthenticated like the health checks; "
    "it holds tenant ids but never keys, tokens or payloads. docs/operations.md lists every metric.",
    security=[{}],
    media_type=CONTENT_TYPE,
    responses={
        200: ResponseSpec(
            data_container=str, media_type="text/plain", description="Prometheus text format", generate_examples=False
        )
    },
)
async def metrics(request: AnyRequest) -> Response[bytes]:
    snapshot = await services(request).platform_metrics.snapshot()
    # Summing every worker's files takes a few milliseconds of file reads: off the event loop.
    body = await asyncio.to_thread(exposition, snapshot)
    return Response(body, media_type=CONTENT_TYPE)
