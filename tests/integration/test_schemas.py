"""Minimal schema registry: register, identical → same version, invalid → 422, get a version."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ORDER_SCHEMA, TenantFixture, idem, new_tenant

Client = httpx.AsyncClient


async def test_register_and_read_versions(client: Client) -> None:
    tenant = await new_tenant(client)
    first = await client.post("/v1/schemas/user.signed-up/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
    assert first.status_code == 201
    assert first.json() == {"event_type": "user.signed-up", "version": 1, "compatibility": "BACKWARD"}

    # Identical (key order does not matter) → 200 with the existing version, no new version.
    reordered = dict(reversed(list(ORDER_SCHEMA.items())))
    same = await client.post("/v1/schemas/user.signed-up/versions", json={"schema": reordered}, headers=tenant.auth)
    assert (same.status_code, same.json()["version"]) == (200, 1)

    changed = {**ORDER_SCHEMA, "description": "v2"}
    second = await client.post("/v1/schemas/user.signed-up/versions", json={"schema": changed}, headers=tenant.auth)
    assert (second.status_code, second.json()["version"]) == (201, 2)

    latest = await client.get("/v1/schemas/user.signed-up/versions/latest", headers=tenant.auth)
    assert latest.status_code == 200
    assert latest.json()["version"] == 2
    assert latest.json()["schema"] == changed
    assert latest.json()["created_by"] == tenant.key_id
    v1 = await client.get("/v1/schemas/user.signed-up/versions/1", headers=tenant.auth)
    assert v1.json()["schema"] == ORDER_SCHEMA

    for missing in (
        "/v1/schemas/user.signed-up/versions/3",
        "/v1/schemas/nothing/versions/latest",
        "/v1/schemas/user.signed-up/versions/0",
        "/v1/schemas/user.signed-up/versions/abc",
    ):
        assert (await client.get(missing, headers=tenant.auth)).status_code == 404, missing


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "nonsense"}, "/schema/type"),
        ({"type": "object", "properties": {"a": {"minimum": "zero"}}}, "/schema/properties/a/minimum"),
        ({"$ref": "https://example.com/remote.json"}, "/schema"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "/schema"),
        ({"$schema": "http://json-schema.org/draft-03/schema#"}, "/schema"),
    ],
)
async def test_invalid_schemas_are_422(client: Client, schema: dict[str, Any], pointer: str) -> None:
    tenant = await new_tenant(client)
    response = await client.post("/v1/schemas/bad.schema/versions", json={"schema": schema}, headers=tenant.auth)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["pointer"] == pointer


@pytest.mark.parametrize("event_type", ["9starts-with-digit", "has space", "trailing.", "a" * 256])
async def test_event_type_names_are_checked(client: Client, event_type: str) -> None:
    tenant = await new_tenant(client)
    response = await client.post(
        f"/v1/schemas/{event_type}/versions", json={"schema": {"type": "object"}}, headers=tenant.auth
    )
    assert response.status_code == 422, response.text


async def test_older_dialects_and_pinned_versions(client: Client) -> None:
    tenant = await new_tenant(client)
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}},
    }
    assert (
        await client.post("/v1/schemas/d4/versions", json={"schema": draft4}, headers=tenant.auth)
    ).status_code == 201
    ok = await client.post(
        "/v1/events", json={"event_type": "d4", "payload": {"n": 1}}, headers={**tenant.auth, **idem()}
    )
    assert ok.status_code == 202
    bad = await client.post(
        "/v1/events", json={"event_type": "d4", "payload": {"n": 0}}, headers={**tenant.auth, **idem()}
    )
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["pointer"] == "/payload/n"

    # A newer version that requires a field (mode NONE allows it); an event pinned to version 1 is still
    # checked against 1.
    await client.put("/v1/schemas/d4/compatibility", json={"compatibility": "NONE"}, headers=tenant.auth)
    v2 = {**draft4, "required": ["n"]}
    assert (await client.post("/v1/schemas/d4/versions", json={"schema": v2}, headers=tenant.auth)).status_code == 201
    latest = await client.post(
        "/v1/events", json={"event_type": "d4", "payload": {}}, headers={**tenant.auth, **idem()}
    )
    assert latest.json()["errors"][0]["pointer"] == "/payload/n"
    pinned = await client.post(
        "/v1/events", json={"event_type": "d4", "payload": {}, "schema_version": 1}, headers={**tenant.auth, **idem()}
    )
    assert (pinned.status_code, pinned.json()["schema_version"]) == (202, 1)
    unknown = await client.post(
        "/v1/events", json={"event_type": "d4", "payload": {}, "schema_version": 9}, headers={**tenant.auth, **idem()}
    )
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["pointer"] == "/schema_version"


async def test_concurrent_registrations_get_distinct_versions(client: Client, tenant: TenantFixture) -> None:
    import asyncio

    schemas = [{"type": "object", "description": f"v{i}"} for i in range(8)]
    responses = await asyncio.gather(
        *(client.post("/v1/schemas/racy/versions", json={"schema": s}, headers=tenant.auth) for s in schemas)
    )
    assert sorted(r.json()["version"] for r in responses) == list(range(1, 9))
