"""The audit log: every admin and schema change is recorded with its actor, in the transaction of the
change; the platform admin reads all of it, a tenant only its own entries."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import ADMIN, ORDER_SCHEMA, TenantFixture, new_key, new_tenant


async def _entries(client: httpx.AsyncClient, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/v1/audit", params=params, headers=headers)
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


async def _changes(client: httpx.AsyncClient) -> TenantFixture:
    """One of every kind of change, made on a new tenant."""
    tenant = await new_tenant(client)
    _, spare_id = await new_key(client, tenant.id, ["events:read"])
    assert (await client.delete(f"/v1/tenants/{tenant.id}/api-keys/{spare_id}", headers=ADMIN)).status_code == 204
    routing = {"topic_template": "acme.{event_type}"}
    assert (await client.put(f"/v1/tenants/{tenant.id}/routing", json=routing, headers=ADMIN)).status_code == 200
    limits = {"events_per_second": 50}
    assert (await client.put(f"/v1/tenants/{tenant.id}/rate-limits", json=limits, headers=ADMIN)).status_code == 200
    url = "/v1/schemas/order.created"
    assert (await client.post(f"{url}/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)).status_code == 201
    # Identical again: no new version, so nothing to audit.
    assert (await client.post(f"{url}/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)).status_code == 200
    mode = {"compatibility": "FULL"}
    assert (await client.put(f"{url}/compatibility", json=mode, headers=tenant.auth)).status_code == 200
    # Refused changes leave no entry: an incompatible version, a redrive of nothing.
    incompatible = {"schema": {**ORDER_SCHEMA, "required": ["order_id", "amount", "currency"]}}
    assert (await client.post(f"{url}/versions", json=incompatible, headers=tenant.auth)).status_code == 409
    assert (await client.post("/v1/dead-letters/redrive", headers=tenant.auth)).json() == {"count": 0}
    return tenant


async def test_every_change_is_recorded_with_its_actor(client: httpx.AsyncClient) -> None:
    tenant = await _changes(client)
    entries = await _entries(client, ADMIN, tenant=tenant.id)
    summary = [(e["action"], e["actor"]) for e in reversed(entries)]
    assert summary == [
        ("tenant.created", "admin"),
        ("api_key.created", "admin"),
        ("api_key.created", "admin"),
        ("api_key.revoked", "admin"),
        ("routing.updated", "admin"),
        ("rate_limits.updated", "admin"),
        ("schema.version_registered", tenant.key_id),
        ("schema.compatibility_updated", tenant.key_id),
    ]
    by_action = {e["action"]: e for e in entries}
    assert by_action["api_key.created"]["target"].startswith("key_")
    assert by_action["api_key.created"]["details"]["scopes"]
    assert by_action["schema.version_registered"]["target"] == "order.created"
    assert by_action["schema.version_registered"]["details"] == {"version": 1, "compatibility": "BACKWARD"}
    assert by_action["schema.compatibility_updated"]["details"] == {"compatibility": "FULL"}
    assert by_action["rate_limits.updated"]["details"] == {"events_per_second": 50, "bytes_per_second": None}
    assert all(e["tenant"] == tenant.id and e["at"] for e in entries)
    # Nothing secret is in the log: neither the key nor its hash.
    assert tenant.key not in str(entries)


async def test_a_tenant_sees_only_its_own_entries(client: httpx.AsyncClient) -> None:
    mine = await _changes(client)
    other = await new_tenant(client)
    own = await _entries(client, mine.auth)
    assert own
    assert {e["tenant"] for e in own} == {mine.id}
    assert {e["tenant"] for e in await _entries(client, other.auth)} == {other.id}
    peek = await client.get("/v1/audit", params={"tenant": mine.id}, headers=other.auth)
    assert peek.status_code == 403
    # The platform admin sees every tenant's entries, newest first.
    everything = await _entries(client, ADMIN, limit=500)
    assert {mine.id, other.id} <= {e["tenant"] for e in everything}
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)


async def test_pages_and_filters(client: httpx.AsyncClient) -> None:
    tenant = await _changes(client)
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"tenant": tenant.id, "limit": 3, **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/v1/audit", params=params, headers=ADMIN)).json()
        pages.append(body["entries"])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [3, 3, 2]
    assert [e["id"] for p in pages for e in p] == [e["id"] for e in await _entries(client, ADMIN, tenant=tenant.id)]
    keys = await _entries(client, tenant.auth, action="api_key.created")
    assert [e["action"] for e in keys] == ["api_key.created", "api_key.created"]
    assert (await client.get("/v1/audit", params={"cursor": "x"}, headers=ADMIN)).status_code == 400
    assert (await client.get("/v1/audit", params={"action": "DROP"}, headers=ADMIN)).status_code == 400
