"""Dead letters (`dead-letters:manage`): list them, and send them through the relay again."""

from __future__ import annotations

from typing import Annotated

from litestar import get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Response

from events_api.auth import Scope
from events_api.dead_letters import MAX_PAGE
from events_api.decoding import decode_body
from events_api.http.routes import AUTHED, TENANT, problems
from events_api.http.services import AnyRequest, authorize_tenant, read_body, services
from events_api.models import DeadLetterPage, RedriveCount, RedriveIn, RedriveOne


@get(
    "/v1/dead-letters",
    tags=["dead letters"],
    summary="The tenant's dead letters, oldest first, with their last error",
    responses=problems(*AUTHED, 422),
    opt={"auth": TENANT(Scope.DEAD_LETTERS_MANAGE)},
)
async def list_dead_letters(
    request: AnyRequest,
    event_type: Annotated[str | None, QueryParameter()] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, QueryParameter(description="`next_cursor` of the previous page")] = None,
) -> DeadLetterPage:
    caller = await authorize_tenant(request, Scope.DEAD_LETTERS_MANAGE)
    return await services(request).dead_letters.page(
        caller.tenant_id, event_type=event_type, limit=limit, cursor=cursor
    )


@post(
    "/v1/dead-letters/{event_id:str}/redrive",
    tags=["dead letters"],
    summary="Deliver a dead letter again (it goes back to the end of its lane)",
    status_code=202,
    responses=problems(*AUTHED, 404),
    opt={"auth": TENANT(Scope.DEAD_LETTERS_MANAGE)},
)
async def redrive_dead_letter(request: AnyRequest, event_id: FromPath[str]) -> RedriveOne:
    caller = await authorize_tenant(request, Scope.DEAD_LETTERS_MANAGE)
    svc = services(request)
    await svc.dead_letters.redrive_one(caller.tenant_id, event_id, svc.clock(), actor=caller.actor)
    return RedriveOne(event_id, "pending")


@post(
    "/v1/dead-letters/redrive",
    tags=["dead letters"],
    summary="Deliver every dead letter again (or those of one event type)",
    status_code=202,
    responses=problems(*AUTHED, 415, 422),
    opt={"auth": TENANT(Scope.DEAD_LETTERS_MANAGE), "request_body": RedriveIn},
)
async def redrive_dead_letters(request: AnyRequest) -> Response[RedriveCount]:
    caller = await authorize_tenant(request, Scope.DEAD_LETTERS_MANAGE)
    _, body = await read_body(request, ("application/json",), optional=True)
    event_type = decode_body(body, RedriveIn).event_type if body else None
    svc = services(request)
    count = await svc.dead_letters.redrive_all(caller.tenant_id, event_type, svc.clock(), actor=caller.actor)
    return Response(RedriveCount(count), status_code=202)
