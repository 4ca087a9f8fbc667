"""The app factory: the whole HTTP service assembled in one place."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from litestar import Litestar, MediaType, Response, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.types import Receive, Scope, Send

from events_api.announcements import VersionAnnouncements
from events_api.audit import Audit
from events_api.dead_letters import DeadLetters
from events_api.errors import Problem, StorageUnavailable
from events_api.http.openapi import openapi_config, openapi_document
from events_api.http.problems import http_exception_handler, internal_error_handler, problem_handler
from events_api.http.routes import audit, dead_letters, events, ops, schemas, tenants
from events_api.http.services import AnyRequest, Services
from events_api.ids import RandomBytes
from events_api.ingest import Ingest
from events_api.logs import REQUEST_FIELDS, current_request_id, log_request, setup_logging
from events_api.metrics import UNMATCHED, ApiMetrics, PlatformMetrics, api_metrics, prepare_worker_directory
from events_api.ratelimit import Effective, RateLimiter
from events_api.schemas import SchemaRegistry
from events_api.settings import Settings
from events_api.storage.database import Database
from events_api.storage.partitions import ensure_partitions, partition_days
from events_api.tenants import Tenants
from events_api.tracing import Tracing, tracing

log = logging.getLogger("events_api")

ROUTES = [
    ops.healthz,
    ops.readyz,
    ops.metrics,
    tenants.create_tenant,
    tenants.create_api_key,
    tenants.revoke_api_key,
    tenants.put_routing,
    tenants.get_routing,
    tenants.put_rate_limits,
    tenants.get_rate_limits,
    audit.list_audit_entries,
    schemas.list_event_types,
    schemas.register_schema,
    schemas.list_schema_versions,
    schemas.get_schema_version,
    schemas.set_compatibility,
    schemas.check_compatibility,
    events.publish_event,
    events.publish_batch,
    events.get_event,
    events.find_event,
    dead_letters.list_dead_letters,
    dead_letters.redrive_dead_letter,
    dead_letters.redrive_dead_letters,
]


@get("/openapi.json", include_in_schema=False, media_type=MediaType.JSON, security=[{}])
async def serve_openapi(request: AnyRequest) -> dict[str, Any]:
    return openapi_document(request.app)


async def answer_options(request: AnyRequest) -> Response[None] | None:
    """OPTIONS lists every method of the path. (Litestar's own answer names only the methods of the first
    handler registered for a path when several handlers share it.)"""
    if request.method != "OPTIONS":
        return None
    template = request.scope["path_template"]
    methods = {m for route in request.app.routes if route.path_format == template for m in route.methods}
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(methods | {"OPTIONS"}))})


# A caller's X-Request-Id is kept when it is short and plain (ids, UUIDs, ULIDs, base64); anything else is
# replaced by a new id, so the logs and the response never carry what a client smuggled into the header.
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._~:/+=@-]{1,128}")


def request_id(headers: Any) -> str:
    """The request's own X-Request-Id if acceptable, else a new random one."""
    for name, value in headers:
        if name == b"x-request-id":
            if _REQUEST_ID.fullmatch(value):
                return str(value.decode("ascii"))
            break
    return os.urandom(8).hex()


class EventsApi(Litestar):
    """Litestar, plus what every HTTP request gets, matched or not: an `X-Request-Id` on the response (and on
    every log line written meanwhile), a latency observation for /metrics and one access log line."""

    metrics: ApiMetrics
    tracing: Tracing | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if self.tracing is None:
            await self._handle(scope, receive, send)
            return
        traceparent = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"traceparent"), None)
        with self.tracing.server_span(scope["method"], traceparent) as span:
            status = await self._handle(scope, receive, send)
            self.tracing.finish_request(span, scope["method"], scope.get("path_template") or UNMATCHED, status)

    async def _handle(self, scope: Any, receive: Any, send: Any) -> int:
        """The request, with its id, latency observation and access line; returns the status sent."""
        started = time.perf_counter()
        rid = request_id(scope["headers"])
        token = current_request_id.set(rid)
        line: dict[str, Any] = {}
        scope[REQUEST_FIELDS] = line  # handlers add tenant, event counts (logs.annotate)
        status = 500
        header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await super().__call__(cast(Scope, scope), cast(Receive, receive), cast(Send, send_with_id))
        finally:
            seconds = time.perf_counter() - started
            current_request_id.reset(token)
            method = scope["method"]
            route = scope.get("path_template") or UNMATCHED
            self.metrics.observe_request(route, method, status, seconds)
            log_request(
                {
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    "request_id": rid,
                    **line,
                }
            )
        return status


def build_services(
    settings: Settings, *, clock: Callable[[], datetime] | None = None, random: RandomBytes = os.urandom
) -> Services:
    now = clock or (lambda: datetime.now(UTC))
    db = Database(settings.sqlalchemy_url, pool_size=settings.db_pool_size)
    registry = SchemaRegistry(db)
    announcements = VersionAnnouncements(settings.redis_url, registry.forget_latest, registry.forget_all_latest)
    registry.announce = announcements.announce
    registry.announced = lambda: announcements.receiving
    tenants = Tenants(db, settings.admin_token, random)
    return Services(
        settings=settings,
        db=db,
        tenants=tenants,
        registry=registry,
        announcements=announcements,
        ingest=Ingest(db, registry, tenants, idempotency_ttl=settings.idempotency_ttl, clock=now, random=random),
        dead_letters=DeadLetters(db),
        limiter=RateLimiter(
            settings.redis_url,
            tenants.store,
            Effective(settings.rate_limit_events_per_second, settings.rate_limit_bytes_per_second),
            largest_request=Effective(settings.max_batch_events, settings.max_body_bytes),
        ),
        audit=Audit(db),
        platform_metrics=PlatformMetrics(db),
        clock=now,
    )


def app_from_environment() -> Litestar:
    """The factory `events-api serve` gives uvicorn: each worker sets up logging and metrics (before any metric
    exists: see events_api.metrics) and reads the environment."""
    settings = Settings.from_env()
    setup_logging(fmt=settings.log_format)
    prepare_worker_directory()
    return create_app(settings.require("database_url", "admin_token"))


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> Litestar:
    """The ASGI app. Without arguments (as uvicorn's factory) it reads the environment."""
    if services is None:
        settings = settings or Settings.from_env().require("database_url", "admin_token")
        services = build_services(settings)
    svc = services

    async def prepare_partitions() -> None:
        # The API never waits for `migrate` to run again before a new day: it creates what is missing.
        try:
            async with svc.db.transaction() as conn:
                await ensure_partitions(conn, partition_days(svc.clock(), svc.settings.partitions_ahead_days))
        except StorageUnavailable:
            log.warning("database unreachable at start; serving 503 until it is back")

    app = EventsApi(
        route_handlers=[*ROUTES, serve_openapi],
        state=State({"services": svc}),
        before_request=answer_options,
        on_startup=[prepare_partitions, svc.announcements.start],
        on_shutdown=[svc.announcements.close, svc.limiter.close, svc.ingest.close, svc.db.dispose],
        exception_handlers={
            Problem: problem_handler,
            HTTPException: http_exception_handler,
            Exception: internal_error_handler,
        },
        openapi_config=openapi_config(),
        request_max_body_size=svc.settings.max_body_bytes,
        logging_config=None,  # events_api.logs owns logging
        debug=False,
    )
    app.metrics = api_metrics()
    app.tracing = tracing("events-api")
    if app.tracing is not None:
        app.on_shutdown.append(app.tracing.shutdown)
    return app
