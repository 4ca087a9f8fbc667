"""The schema registry for teams: listing, compatibility modes and checks, limits, example schemas, and
new versions reaching every replica (Redis announcements, with a TTL fallback when Redis is down)."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from tests.conftest import ADMIN_TOKEN, TenantFixture, idem, new_key, new_tenant
from tests.support.asgi import running

Client = httpx.AsyncClient
EXAMPLES = Path(__file__).resolve().parents[2] / "schemas"
BASE: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["id"],
}


async def _register(client: Client, tenant: TenantFixture, event_type: str, schema: Any) -> httpx.Response:
    return await client.post(f"/v1/schemas/{event_type}/versions", json={"schema": schema}, headers=tenant.auth)


async def test_list_types_and_versions(client: Client) -> None:
    tenant = await new_tenant(client)
    assert (await client.get("/v1/schemas", headers=tenant.auth)).json() == {"event_types": []}
    await _register(client, tenant, "b.type", BASE)
    await _register(client, tenant, "a.type", BASE)
    await _register(client, tenant, "a.type", {**BASE, "description": "v2"})

    types = (await client.get("/v1/schemas", headers=tenant.auth)).json()["event_types"]
    assert [(t["event_type"], t["latest_version"], t["compatibility"]) for t in types] == [
        ("a.type", 2, "BACKWARD"),
        ("b.type", 1, "BACKWARD"),
    ]
    versions = (await client.get("/v1/schemas/a.type/versions", headers=tenant.auth)).json()
    assert versions["event_type"] == "a.type"
    assert [(v["version"], v["created_by"]) for v in versions["versions"]] == [(1, tenant.key_id), (2, tenant.key_id)]
    assert all(v["created_at"] for v in versions["versions"])
    assert (await client.get("/v1/schemas/none.here/versions", headers=tenant.auth)).status_code == 404


async def test_incompatible_registration_is_409_with_every_incompatibility(client: Client) -> None:
    tenant = await new_tenant(client)
    await _register(client, tenant, "order.placed", BASE)
    # Lenient policy: adding an optional property is fine under the default BACKWARD mode.
    optional = {**BASE, "properties": {**BASE["properties"], "note": {"type": "string"}}}
    assert (await _register(client, tenant, "order.placed", optional)).status_code == 201

    breaking = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "n": {"type": "string"}, "note": {"type": "string"}},
        "required": ["id", "note"],
    }
    refused = await _register(client, tenant, "order.placed", breaking)
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"].endswith("/conflict")
    pointers = {e["pointer"] for e in problem["errors"]}
    assert "/schema/properties/n/type" in pointers or "/schema/properties/n" in pointers
    assert any(p.startswith("/schema/required") or p == "/schema" or "note" in p for p in pointers), pointers
    assert all(e["message"] for e in problem["errors"])
    # Nothing was stored.
    latest = (await client.get("/v1/schemas/order.placed/versions/latest", headers=tenant.auth)).json()
    assert latest["version"] == 2

    check = await client.post(
        "/v1/schemas/order.placed/compatibility-check", json={"schema": breaking}, headers=tenant.auth
    )
    assert check.status_code == 200
    assert check.json()["compatible"] is False
    assert len(check.json()["messages"]) == len(problem["errors"])
    assert {f["direction"] for f in check.json()["findings"]} == {"BACKWARD"}
    assert all(f["against_version"] == 2 for f in check.json()["findings"])
    ok = await client.post(
        "/v1/schemas/order.placed/compatibility-check", json={"schema": optional}, headers=tenant.auth
    )
    assert ok.json() == {"compatible": True, "messages": [], "findings": []}
    new_type = await client.post(
        "/v1/schemas/brand.new/compatibility-check", json={"schema": BASE}, headers=tenant.auth
    )
    assert new_type.json()["compatible"] is True


async def test_compatibility_modes(client: Client) -> None:
    tenant = await new_tenant(client)
    await _register(client, tenant, "m.type", BASE)
    required_n = {**BASE, "required": ["id", "n"]}

    bad_mode = await client.put(
        "/v1/schemas/m.type/compatibility", json={"compatibility": "SIDEWAYS"}, headers=tenant.auth
    )
    assert bad_mode.status_code == 422
    missing = await client.put("/v1/schemas/ghost/compatibility", json={"compatibility": "NONE"}, headers=tenant.auth)
    assert missing.status_code == 404
    reader_key, _ = await new_key(client, tenant.id, ["events:read"])
    reader = {"Authorization": f"Bearer {reader_key}"}
    forbidden = await client.put("/v1/schemas/m.type/compatibility", json={"compatibility": "NONE"}, headers=reader)
    assert forbidden.status_code == 403

    # FORWARD: adding a required property is fine (old readers ignore it), removing one is not.
    forward = await client.put(
        "/v1/schemas/m.type/compatibility", json={"compatibility": "FORWARD"}, headers=tenant.auth
    )
    assert forward.json() == {"event_type": "m.type", "compatibility": "FORWARD"}
    assert (await _register(client, tenant, "m.type", required_n)).status_code == 201
    nothing_required = {"type": "object", "properties": BASE["properties"]}
    assert (await _register(client, tenant, "m.type", nothing_required)).status_code == 409

    # NONE accepts anything valid.
    await client.put("/v1/schemas/m.type/compatibility", json={"compatibility": "NONE"}, headers=tenant.auth)
    anything = {"type": "object", "properties": {"id": {"type": "integer"}}}
    assert (await _register(client, tenant, "m.type", anything)).status_code == 201
    types = (await client.get("/v1/schemas", headers=tenant.auth)).json()["event_types"]
    assert types[0]["compatibility"] == "NONE"


async def test_transitive_modes_check_every_version(client: Client) -> None:
    tenant = await new_tenant(client)
    v1 = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}}
    v2 = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 100}}}
    v3 = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 100}, "m": {"type": "string"}}}
    await _register(client, tenant, "t.type", v1)
    await client.put("/v1/schemas/t.type/compatibility", json={"compatibility": "FULL"}, headers=tenant.auth)
    # v2 widens n: FULL refuses (breaks FORWARD against v1).
    assert (await _register(client, tenant, "t.type", v2)).status_code == 409
    await client.put("/v1/schemas/t.type/compatibility", json={"compatibility": "BACKWARD"}, headers=tenant.auth)
    assert (await _register(client, tenant, "t.type", v2)).status_code == 201
    # v3 adds an optional property: FORWARD against v2 alone is fine, but not against v1 (maximum 10).
    await client.put("/v1/schemas/t.type/compatibility", json={"compatibility": "FORWARD"}, headers=tenant.auth)
    check = await client.post("/v1/schemas/t.type/compatibility-check", json={"schema": v3}, headers=tenant.auth)
    assert check.json()["compatible"] is True
    await client.put(
        "/v1/schemas/t.type/compatibility", json={"compatibility": "FORWARD_TRANSITIVE"}, headers=tenant.auth
    )
    transitive = await client.post("/v1/schemas/t.type/compatibility-check", json={"schema": v3}, headers=tenant.auth)
    assert transitive.json()["compatible"] is False
    assert {f["against_version"] for f in transitive.json()["findings"]} == {1}
    assert (await _register(client, tenant, "t.type", v3)).status_code == 409


async def test_schema_limits(client: Client) -> None:
    tenant = await new_tenant(client)
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"x": deep}}
    assert (await _register(client, tenant, "deep", deep)).status_code == 422
    huge = {"type": "object", "description": "x" * 300_000}
    assert (await _register(client, tenant, "huge", huge)).status_code in (413, 422)


async def test_two_tenants_with_one_type_name_are_independent(client: Client) -> None:
    first, second = await new_tenant(client), await new_tenant(client)
    await _register(client, first, "shared.name", BASE)
    await _register(client, first, "shared.name", {**BASE, "description": "2"})
    other = {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
    registered = await _register(client, second, "shared.name", other)
    assert (registered.status_code, registered.json()["version"]) == (201, 1)
    await client.put("/v1/schemas/shared.name/compatibility", json={"compatibility": "NONE"}, headers=second.auth)
    firsts = (await client.get("/v1/schemas", headers=first.auth)).json()["event_types"]
    assert [(t["latest_version"], t["compatibility"]) for t in firsts] == [(2, "BACKWARD")]
    # Each tenant's events are validated against its own schema.
    ok = await client.post(
        "/v1/events", json={"event_type": "shared.name", "payload": {"x": True}}, headers={**second.auth, **idem()}
    )
    assert ok.status_code == 202
    wrong = await client.post(
        "/v1/events", json={"event_type": "shared.name", "payload": {"x": True}}, headers={**first.auth, **idem()}
    )
    assert wrong.status_code == 422


def _example(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return loaded


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
async def test_example_schemas_register_and_validate(client: Client, path: Path) -> None:
    tenant = await new_tenant(client)
    event_type = path.name.removesuffix(".json")
    assert (await _register(client, tenant, event_type, _example(event_type))).status_code == 201
    refused = await client.post(
        "/v1/events", json={"event_type": event_type, "payload": {}}, headers={**tenant.auth, **idem()}
    )
    assert refused.status_code == 422
    assert all(e["pointer"].startswith("/payload/") for e in refused.json()["errors"])


async def _replica(settings: Settings, redis_url: str) -> Any:
    services = build_services(
        Settings(database_url=settings.database_url, admin_token=ADMIN_TOKEN, redis_url=redis_url)
    )
    services.registry.monotonic = lambda: 0.0  # a frozen clock: cached entries never expire by age
    return services


async def test_new_version_reaches_other_replicas_through_redis(settings: Settings) -> None:
    redis_url = "redis://127.0.0.1:6379/0"
    a, b = await _replica(settings, redis_url), await _replica(settings, redis_url)
    async with running(create_app(services=a)) as replica_a, running(create_app(services=b)) as replica_b:
        for _ in range(50):
            if a.announcements.receiving and b.announcements.receiving:
                break
            await asyncio.sleep(0.05)
        assert a.announcements.receiving
        tenant = await new_tenant(replica_a)
        event_type = "announced." + secrets.token_hex(3)
        await _register(replica_a, tenant, event_type, {"type": "object"})
        first = await replica_a.post(
            "/v1/events", json={"event_type": event_type, "payload": {}}, headers={**tenant.auth, **idem()}
        )
        assert first.json()["schema_version"] == 1  # replica A now caches "latest = 1"

        await replica_b.put(
            f"/v1/schemas/{event_type}/compatibility", json={"compatibility": "NONE"}, headers=tenant.auth
        )
        assert (
            await _register(replica_b, tenant, event_type, {"type": "object", "required": ["x"]})
        ).status_code == 201
        for _ in range(40):
            response = await replica_a.post(
                "/v1/events", json={"event_type": event_type, "payload": {"x": 1}}, headers={**tenant.auth, **idem()}
            )
            if response.json()["schema_version"] == 2:
                break
            await asyncio.sleep(0.05)
        assert response.json()["schema_version"] == 2


async def test_without_redis_ingest_goes_on_and_versions_arrive_after_the_ttl(settings: Settings) -> None:
    from tests.conftest import free_port

    closed = f"redis://127.0.0.1:{free_port()}/0"
    a = await _replica(settings, closed)
    now = [0.0]
    a.registry.monotonic = lambda: now[0]
    b = await _replica(settings, closed)
    async with running(create_app(services=a)) as replica_a, running(create_app(services=b)) as replica_b:
        assert not a.announcements.receiving
        tenant = await new_tenant(replica_a)
        await _register(replica_a, tenant, "fallback.type", {"type": "object"})
        published = await replica_a.post(
            "/v1/events", json={"event_type": "fallback.type", "payload": {}}, headers={**tenant.auth, **idem()}
        )
        assert (published.status_code, published.json()["schema_version"]) == (202, 1)
        await _register(replica_b, tenant, "fallback.type", {"type": "object", "description": "v2"})
        cached = await replica_a.post(
            "/v1/events", json={"event_type": "fallback.type", "payload": {}}, headers={**tenant.auth, **idem()}
        )
        assert cached.json()["schema_version"] == 1  # within the short TTL
        now[0] += 1.5
        fresh = await replica_a.post(
            "/v1/events", json={"event_type": "fallback.type", "payload": {}}, headers={**tenant.auth, **idem()}
        )
        assert fresh.json()["schema_version"] == 2
