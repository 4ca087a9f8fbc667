"""PUT/GET /v1/tenants/{tenant}/routing."""

from __future__ import annotations

import httpx

from tests.conftest import ADMIN, TenantFixture, new_tenant


async def test_routing_defaults_set_and_validation(client: httpx.AsyncClient) -> None:
    tenant: TenantFixture = await new_tenant(client)
    path = f"/v1/tenants/{tenant.id}/routing"
    defaults = await client.get(path, headers=ADMIN)
    assert defaults.json() == {
        "tenant": tenant.id,
        "topic_template": "{tenant}.{event_type}",
        "dead_letter_topic": "{tenant}.dead-letter",
        "topics": {},
        "cluster": "default",
    }
    body = {"topic_template": "events.{tenant}", "topics": {"order.shipped": "shipping"}, "cluster": "eu"}
    stored = await client.put(path, json=body, headers=ADMIN)
    assert stored.status_code == 200, stored.text
    assert stored.json()["dead_letter_topic"] == "{tenant}.dead-letter"
    assert (await client.get(path, headers=ADMIN)).json() == stored.json()

    bad = await client.put(path, json={"topic_template": "a b", "topics": {"x": "no/slash"}}, headers=ADMIN)
    assert bad.status_code == 422
    assert {e["pointer"] for e in bad.json()["errors"]} == {"/topic_template", "/topics/x"}
    unknown_field = await client.put(path, json={"topic": "x"}, headers=ADMIN)
    assert unknown_field.status_code == 422
    assert (await client.put("/v1/tenants/ghost/routing", json={}, headers=ADMIN)).status_code == 404
    assert (await client.put(path, json={}, headers=tenant.auth)).status_code == 403
    assert (await client.get(path)).status_code == 401
