"""Admin token, tenant keys, scopes, revocation and tenant isolation."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import ADMIN, TenantFixture, idem, new_key, new_tenant, order

Client = httpx.AsyncClient


def _is_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= body.keys()
    return body


async def test_create_tenant(client: Client) -> None:
    tenant_id = "acme-" + secrets.token_hex(4)
    created = await client.post("/v1/tenants", json={"id": tenant_id}, headers=ADMIN)
    assert created.status_code == 201
    assert created.json()["id"] == tenant_id
    _is_problem(await client.post("/v1/tenants", json={"id": tenant_id}, headers=ADMIN), 409)


@pytest.mark.parametrize("bad_id", ["A", "a", "1abc", "has_underscore", "x" * 64, "-dash", "Acme"])
async def test_tenant_id_must_match_the_pattern(client: Client, bad_id: str) -> None:
    body = _is_problem(await client.post("/v1/tenants", json={"id": bad_id}, headers=ADMIN), 422)
    assert body["errors"][0]["pointer"] == "/id"


async def test_admin_endpoints_need_the_admin_token(client: Client, tenant: TenantFixture) -> None:
    _is_problem(await client.post("/v1/tenants", json={"id": "nobody-here"}), 401)
    wrong = {"Authorization": "Bearer not-the-token"}
    _is_problem(await client.post("/v1/tenants", json={"id": "nobody-here"}, headers=wrong), 401)
    _is_problem(await client.post("/v1/tenants", json={"id": "nobody-here"}, headers=tenant.auth), 403)
    _is_problem(
        await client.post(f"/v1/tenants/{tenant.id}/api-keys", json={"scopes": ["events:read"]}, headers=tenant.auth),
        403,
    )


async def test_keys_are_stored_only_as_hashes(client: Client, sql: psycopg.Connection[Any]) -> None:
    tenant = await new_tenant(client)
    secret = tenant.key.split("_", 2)[2]
    row = sql.execute("SELECT secret_hash, scopes FROM api_keys WHERE id = %s", (tenant.key_id,)).fetchone()
    assert row is not None
    assert bytes(row[0]) == hashlib.sha256(secret.encode()).digest()
    dump = str(sql.execute("SELECT * FROM api_keys WHERE id = %s", (tenant.key_id,)).fetchall())
    assert secret not in dump
    assert tenant.key.startswith("evk_")


async def test_key_for_unknown_tenant_and_bad_scopes(client: Client) -> None:
    _is_problem(await client.post("/v1/tenants/ghost/api-keys", json={"scopes": ["events:read"]}, headers=ADMIN), 404)
    tenant = await new_tenant(client)
    for scopes in ([], ["events:everything"]):
        body = _is_problem(
            await client.post(f"/v1/tenants/{tenant.id}/api-keys", json={"scopes": scopes}, headers=ADMIN), 422
        )
        assert body["errors"][0]["pointer"].startswith("/scopes")


async def test_revoked_key_is_refused_at_once(client: Client, tenant: TenantFixture) -> None:
    ok = await client.post("/v1/events", json=order(), headers={**tenant.auth, **idem()})
    assert ok.status_code == 202
    revoked = await client.delete(f"/v1/tenants/{tenant.id}/api-keys/{tenant.key_id}", headers=ADMIN)
    assert revoked.status_code == 204
    _is_problem(await client.post("/v1/events", json=order(), headers={**tenant.auth, **idem()}), 401)
    # Revoking is idempotent; an unknown key, or another tenant's, is 404.
    again = await client.delete(f"/v1/tenants/{tenant.id}/api-keys/{tenant.key_id}", headers=ADMIN)
    assert again.status_code == 204
    _is_problem(await client.delete(f"/v1/tenants/{tenant.id}/api-keys/key_nope", headers=ADMIN), 404)
    other = await new_tenant(client)
    _is_problem(await client.delete(f"/v1/tenants/{other.id}/api-keys/{tenant.key_id}", headers=ADMIN), 404)


async def test_expired_key_is_refused(client: Client, tenant: TenantFixture) -> None:
    response = await client.post(
        f"/v1/tenants/{tenant.id}/api-keys",
        json={"scopes": ["events:read"], "expires_at": "2020-01-01T00:00:00Z"},
        headers=ADMIN,
    )
    _is_problem(response, 422)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "Basic abc",
        "Bearer ",
        "Bearer evk_nope_" + "0" * 64,
        "Bearer evk_short",
    ],
)
async def test_malformed_or_unknown_credentials_are_401(client: Client, token: str) -> None:
    body = _is_problem(await client.post("/v1/events", json=order(), headers={"Authorization": token, **idem()}), 401)
    assert "WWW-Authenticate".lower() in {h.lower() for h in (await client.get("/v1/events/evt_x")).headers}
    assert body["type"].endswith("/unauthorized")


async def test_a_tampered_secret_is_refused(client: Client, tenant: TenantFixture) -> None:
    prefix, key_id, secret = tenant.key.split("_", 2)
    tampered = f"{prefix}_{key_id}_{secret[:-1]}{'0' if secret[-1] != '0' else '1'}"
    response = await client.post("/v1/events", json=order(), headers={"Authorization": f"Bearer {tampered}", **idem()})
    _is_problem(response, 401)


async def test_scopes(client: Client, tenant: TenantFixture) -> None:
    read_key, _ = await new_key(client, tenant.id, ["events:read"])
    publish_key, _ = await new_key(client, tenant.id, ["events:publish"])
    reader = {"Authorization": f"Bearer {read_key}"}
    publisher = {"Authorization": f"Bearer {publish_key}"}

    _is_problem(await client.post("/v1/events", json=order(), headers={**reader, **idem()}), 403)
    _is_problem(
        await client.post("/v1/schemas/x/versions", json={"schema": {"type": "object"}}, headers=publisher), 403
    )
    published = await client.post("/v1/events", json=order(), headers={**publisher, **idem()})
    assert published.status_code == 202
    event_id = published.json()["event_id"]
    # events:read or events:publish may read.
    assert (await client.get(f"/v1/events/{event_id}", headers=reader)).status_code == 200
    assert (await client.get(f"/v1/events/{event_id}", headers=publisher)).status_code == 200
    # Schemas are readable by any key of the tenant.
    assert (await client.get("/v1/schemas/order.created/versions/latest", headers=reader)).status_code == 200


async def test_tenants_are_isolated(client: Client, tenant: TenantFixture) -> None:
    other = await new_tenant(client)
    key = secrets.token_hex(8)
    published = await client.post("/v1/events", json=order(), headers={**tenant.auth, "Idempotency-Key": key})
    event_id = published.json()["event_id"]

    missing = await client.get("/v1/events/evt_01M7YHMR0709BNNTSHMGF0ZP84", headers=other.auth)
    foreign = await client.get(f"/v1/events/{event_id}", headers=other.auth)
    # Another tenant's event looks exactly like one that does not exist.
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["title"] == missing.json()["title"]
    assert (await client.get("/v1/events", params={"idempotency_key": key}, headers=other.auth)).status_code == 404
    # Its schemas are invisible, and its event types do not exist for the other tenant.
    assert (await client.get("/v1/schemas/order.created/versions/1", headers=other.auth)).status_code == 404
    rejected = await client.post("/v1/events", json=order(), headers={**other.auth, **idem()})
    assert rejected.status_code == 422
    # The same idempotency key in another tenant is a different key.
    theirs = await client.post(
        "/v1/schemas/order.created/versions", json={"schema": {"type": "object"}}, headers=other.auth
    )
    assert theirs.status_code == 201
    own = await client.post("/v1/events", json=order(), headers={**other.auth, "Idempotency-Key": key})
    assert own.status_code == 202
    assert own.json()["event_id"] != event_id
    assert "Idempotent-Replayed" not in own.headers


async def test_revocation_binds_at_once_on_another_replica(settings: Any) -> None:
    """Replica A has the key cached from a publish; the key is revoked through replica B. A refuses
    the very next publish, replay and invalid request: the accept statement re-checks the key."""
    from events_api.http.app import build_services, create_app
    from tests.conftest import ORDER_SCHEMA
    from tests.support.asgi import running

    async with (
        running(create_app(services=build_services(settings))) as replica_a,
        running(create_app(services=build_services(settings))) as replica_b,
    ):
        tenant = await new_tenant(replica_b)
        await replica_b.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
        key = secrets.token_hex(8)
        first = await replica_a.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
        assert first.status_code == 202

        revoked = await replica_b.delete(f"/v1/tenants/{tenant.id}/api-keys/{tenant.key_id}", headers=ADMIN)
        assert revoked.status_code == 204

        for body, idempotency_key in [(order(2), secrets.token_hex(8)), (order(1), key), ({"event_type": "x"}, key)]:
            response = await replica_a.post(
                "/v1/events", json=body, headers={**tenant.auth, "Idempotency-Key": idempotency_key}
            )
            _is_problem(response, 401)
        batch = await replica_a.post("/v1/events/batch", json={"events": [order(3)]}, headers={**tenant.auth, **idem()})
        _is_problem(batch, 401)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/tenants/a%00b/api-keys"),
        ("delete", "/v1/tenants/acme/api-keys/key%00x"),
        ("delete", "/v1/tenants/a%00b/api-keys/key_0123456789abcdef"),
        ("post", "/v1/tenants/acme%0A/api-keys"),
    ],
)
async def test_malformed_admin_path_parameters_are_404(client: Client, method: str, path: str) -> None:
    kwargs: dict[str, Any] = {"headers": ADMIN}
    if method == "post":
        kwargs["json"] = {"scopes": ["events:read"]}
    response = await getattr(client, method)(path, **kwargs)
    assert response.status_code == 404, response.text


async def test_event_type_with_a_trailing_newline_is_refused(client: Client, tenant: TenantFixture) -> None:
    response = await client.post(
        "/v1/schemas/order.created%0A/versions", json={"schema": {"type": "object"}}, headers=tenant.auth
    )
    assert response.status_code == 422
