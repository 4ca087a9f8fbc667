"""Publishing events and reading their delivery status."""

from __future__ import annotations

from typing import Annotated

from litestar import get, post
from litestar.datastructures import ResponseHeader
from litestar.params import FromPath, HeaderParameter, QueryParameter
from litestar.response import Response

from events_api.auth import Scope
from events_api.errors import BadRequest, Problem
from events_api.http.routes import AUTHED, TENANT, problems
from events_api.http.services import AnyRequest, authorize_tenant, read_body, services
from events_api.idempotency import parse_idempotency_key
from events_api.ingest import BodyFormat, Operation, Outcome, Submitted, decode_batch, decode_event, valid_traceparent
from events_api.logs import annotate
from events_api.metrics import api_metrics
from events_api.models import BatchAccepted, BatchIn, EventAccepted, EventIn, EventStatus, EventStatusList

IdempotencyKeyHeader = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        required=True,
        description='1-255 printable ASCII characters; the RFC 8941 quoted form `"abc"` means `abc`. '
        "Reuse it on every retry of the same request.",
    ),
]
TraceparentHeader = Annotated[
    str | None,
    HeaderParameter(name="traceparent", required=False, description="W3C trace context, forwarded to Kafka."),
]
REPLAY_HEADER = ResponseHeader(
    name="Idempotent-Replayed",
    documentation_only=True,
    description="`true` when this is a stored response replayed",
)
PUBLISH_ERRORS = problems(*AUTHED, 409, 413, 415, 422, 429)
_SINGLE_TYPES: dict[str, BodyFormat] = {"application/json": "native", "application/cloudevents+json": "cloudevents"}
_BATCH_TYPES: dict[str, BodyFormat] = {
    "application/json": "native",
    "application/cloudevents-batch+json": "cloudevents-batch",
}


async def _publish(
    request: AnyRequest, key_header: str | None, traceparent: str | None, operation: Operation
) -> Response[bytes]:
    svc = services(request)
    # Cached: a key revoked since it was cached never stores anything (the accept statement checks it),
    # and every other answer re-reads the key first, below and in Ingest's replay.
    caller = await authorize_tenant(request, Scope.EVENTS_PUBLISH, cached=True)
    try:
        key = parse_idempotency_key(key_header)
        accepted = _SINGLE_TYPES if operation == "event" else _BATCH_TYPES
        kind, body = await read_body(request, tuple(accepted))
        events: list[Submitted]
        if operation == "event":
            events = [decode_event(body, accepted[kind])]
        else:
            events = decode_batch(body, accepted[kind], svc.settings.max_batch_events)
        annotate(request.scope, events=len(events))
        await svc.limiter.admit(caller.tenant_id, len(events), len(body))
        outcome = await svc.ingest.publish(caller, key, operation, events, traceparent=valid_traceparent(traceparent))
    except Problem as problem:
        if 400 <= problem.status < 500 and problem.status != 401:
            await svc.tenants.confirm(caller, svc.clock())
        raise
    if outcome.replayed:
        annotate(request.scope, replayed=True)
    elif outcome.status == 202:
        api_metrics().count_accepted(caller.tenant_id, len(events))
    if outcome.location:
        annotate(request.scope, event_id=outcome.location.rsplit("/", 1)[-1])
    return _render(outcome)


def _render(outcome: Outcome) -> Response[bytes]:
    headers = {}
    if outcome.location:
        headers["Location"] = outcome.location
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(outcome.body, status_code=outcome.status, media_type="application/json", headers=headers)


@post(
    "/v1/events",
    tags=["events"],
    summary="Publish one event",
    description="Answers 202 only once the event is committed in the outbox. Accepts a native event "
    "(`application/json`) or a CloudEvents 1.0 structured event (`application/cloudevents+json`).",
    status_code=202,
    responses=PUBLISH_ERRORS,
    response_headers=[
        ResponseHeader(name="Location", documentation_only=True, description="`/v1/events/{event_id}`"),
        REPLAY_HEADER,
    ],
    opt={"auth": TENANT(Scope.EVENTS_PUBLISH), "request_body": EventIn, "response_body": EventAccepted},
)
async def publish_event(
    request: AnyRequest, idempotency_key: IdempotencyKeyHeader, traceparent: TraceparentHeader = None
) -> Response[bytes]:
    return await _publish(request, idempotency_key, traceparent, "event")


@post(
    "/v1/events/batch",
    tags=["events"],
    summary="Publish a batch of events, all or nothing",
    description="One Idempotency-Key for the whole batch; any invalid event fails the batch and stores nothing.",
    status_code=202,
    responses=PUBLISH_ERRORS,
    response_headers=[REPLAY_HEADER],
    opt={"auth": TENANT(Scope.EVENTS_PUBLISH), "request_body": BatchIn, "response_body": BatchAccepted},
)
async def publish_batch(
    request: AnyRequest, idempotency_key: IdempotencyKeyHeader, traceparent: TraceparentHeader = None
) -> Response[bytes]:
    return await _publish(request, idempotency_key, traceparent, "batch")


@get(
    "/v1/events/{event_id:str}",
    tags=["events"],
    summary="Delivery status of one event",
    responses=problems(*AUTHED, 404),
    opt={"auth": TENANT(Scope.EVENTS_READ, Scope.EVENTS_PUBLISH)},
)
async def get_event(request: AnyRequest, event_id: FromPath[str]) -> EventStatus:
    caller = await authorize_tenant(request, Scope.EVENTS_READ, Scope.EVENTS_PUBLISH)
    return await services(request).ingest.status(caller.tenant_id, event_id)


@get(
    "/v1/events",
    tags=["events"],
    summary="Find the event(s) stored under an Idempotency-Key",
    description='For a key used with `POST /v1/events` the event; for a batch key `{"events": [...]}`.',
    responses=problems(*AUTHED, 404),
    opt={"auth": TENANT(Scope.EVENTS_READ, Scope.EVENTS_PUBLISH)},
)
async def find_event(
    request: AnyRequest,
    idempotency_key: Annotated[str | None, QueryParameter(name="idempotency_key", required=True)] = None,
) -> EventStatus | EventStatusList:
    caller = await authorize_tenant(request, Scope.EVENTS_READ, Scope.EVENTS_PUBLISH)
    if idempotency_key is None:
        raise BadRequest("the idempotency_key query parameter is required")
    return await services(request).ingest.status_by_key(caller.tenant_id, parse_idempotency_key(idempotency_key))
