"""Every operation of the OpenAPI document, walked with every kind of wrong caller.

Generated from the document (its `x-auth` says who may call each operation), so a new endpoint is
covered the moment it exists: no credentials, a malformed or unknown or revoked key → 401; a key
without the scope, or the admin token on a tenant endpoint (and a tenant key on an admin one) → 403; the
declared scope → neither; another tenant's key on this tenant's resources → 404, exactly as for a
resource that does not exist.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from events_api.http.app import build_services, create_app
from events_api.http.openapi import openapi_document
from events_api.settings import Settings
from tests.conftest import ADMIN, ALL_SCOPES, ORDER_SCHEMA, TenantFixture, new_key, new_tenant, order

OFFLINE = Settings(database_url="postgresql://localhost/none", admin_token="unused")
DOCUMENT = openapi_document(create_app(services=build_services(OFFLINE)))
OPERATIONS = sorted(
    (path, method, operation)
    for path, item in DOCUMENT["paths"].items()
    if path.startswith("/v1/")
    for method, operation in item.items()
)
IDS = [f"{method.upper()} {path}" for path, method, _ in OPERATIONS]
# Operations naming an existing resource of the tenant in their path; registering a version and checking
# compatibility act on the caller's own event type of that name, so they name nothing of another tenant.
NAMES_A_RESOURCE = re.compile(r"\{(event_id|event_type)\}")
ACTS_ON_OWN = {("post", "versions"), ("post", "compatibility-check")}
FOREIGN = [
    (path, method, operation, f"{method.upper()} {path}")
    for path, method, operation in OPERATIONS
    if NAMES_A_RESOURCE.search(path)
    and not operation.get("x-auth", {}).get("admin")
    and (method, path.rsplit("/", 1)[-1]) not in ACTS_ON_OWN
]


# A valid body where `{}` would fail validation before the resource is looked up.
VALID_BODIES = {"compatibility": b'{"compatibility": "NONE"}'}


@dataclass
class World:
    owner: TenantFixture
    other: TenantFixture
    event_id: str
    revoked_key: str


@pytest.fixture
async def world(client: httpx.AsyncClient) -> World:
    owner, other = await new_tenant(client), await new_tenant(client)
    # Only the owner has the event type: the other tenant must not see it, whatever it asks.
    await client.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=owner.auth)
    published = await client.post("/v1/events", json=order(1), headers={**owner.auth, "Idempotency-Key": "matrix"})
    revoked_key, revoked_id = await new_key(client, owner.id, ALL_SCOPES)
    await client.delete(f"/v1/tenants/{owner.id}/api-keys/{revoked_id}", headers=ADMIN)
    return World(owner, other, published.json()["event_id"], revoked_key)


def _url(path: str, world: World, *, event_id: str | None = None, event_type: str = "order.created") -> str:
    values = {
        "tenant": world.owner.id,
        "key_id": world.owner.key_id,
        "event_type": event_type,
        "version": "1",
        "event_id": event_id or world.event_id,
    }
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


async def _call(client: httpx.AsyncClient, method: str, url: str, token: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Idempotency-Key": secrets.token_hex(8)}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = VALID_BODIES.get(url.rsplit("/", 1)[-1], b"{}") if method in {"post", "put"} else None
    params = {"idempotency_key": "matrix"} if url.endswith("/v1/events") and method == "get" else None
    return await client.request(method, url, content=body, headers=headers, params=params)


def _auth(operation: dict[str, Any]) -> dict[str, Any]:
    auth: dict[str, Any] = operation.get("x-auth", {})
    assert auth, "every /v1 operation declares who may call it (opt auth, published as x-auth)"
    return auth


@pytest.mark.parametrize(("path", "method", "operation"), OPERATIONS, ids=IDS)
async def test_wrong_callers_are_refused(
    client: httpx.AsyncClient, world: World, path: str, method: str, operation: dict[str, Any]
) -> None:
    auth = _auth(operation)
    url = _url(path, world)
    for token in (None, "", "not-a-key", "evk_" + "a" * 16 + "_" + "0" * 64, world.revoked_key):
        response = await _call(client, method, url, token or None)
        assert response.status_code == 401, (token, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")

    if "tenant_scopes_any_of" not in auth:  # the platform admin only
        assert auth["admin"]
        refused = await _call(client, method, url, world.owner.key)
        assert refused.status_code == 403, refused.text
        as_admin = await _call(client, method, url, ADMIN["Authorization"].removeprefix("Bearer "))
        assert as_admin.status_code not in (401, 403), as_admin.text
        return
    as_admin = await _call(client, method, url, ADMIN["Authorization"].removeprefix("Bearer "))
    if auth.get("admin"):  # the admin, or a tenant key for the tenant's own part
        assert as_admin.status_code not in (401, 403), as_admin.text
    else:
        assert as_admin.status_code == 403, as_admin.text
    wanted: list[str] = auth["tenant_scopes_any_of"]
    if wanted:
        lacking = [s for s in ALL_SCOPES if s not in wanted]
        key, _ = await new_key(client, world.owner.id, lacking)
        refused = await _call(client, method, url, key)
        assert refused.status_code == 403, refused.text
    for scope in wanted or ["events:read"]:
        key, _ = await new_key(client, world.owner.id, [scope])
        allowed = await _call(client, method, url, key)
        assert allowed.status_code not in (401, 403), (scope, allowed.text)


@pytest.mark.parametrize(("path", "method", "operation"), [f[:3] for f in FOREIGN], ids=[f[3] for f in FOREIGN])
async def test_another_tenants_resources_look_missing(
    client: httpx.AsyncClient, world: World, path: str, method: str, operation: dict[str, Any]
) -> None:
    foreign = await _call(client, method, _url(path, world), world.other.key)
    missing = await _call(
        client,
        method,
        _url(path, world, event_id="evt_01M7YHMR0709BNNTSHMGF0ZP84", event_type="no.such"),
        world.owner.key,
    )
    assert foreign.status_code == missing.status_code == 404, (foreign.text, missing.text)
    assert foreign.json()["type"] == missing.json()["type"]
    assert foreign.json()["title"] == missing.json()["title"]
