"""Liveness and readiness."""

from __future__ import annotations

from litestar import get
from litestar.response import Response

from events_api.errors import StorageUnavailable
from events_api.http.routes import problems
from events_api.http.services import AnyRequest, services
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
