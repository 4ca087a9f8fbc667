"""The database goes away mid-test: clients get 503 + Retry-After, never a 202 without its row,
and the same process recovers when the database is back."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from tests.conftest import ORDER_SCHEMA, TenantFixture, new_tenant, order
from tests.support.asgi import running
from tests.support.proxy import TcpProxy

Client = httpx.AsyncClient


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(database_url)
    tcp = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await tcp.start()
    yield tcp
    await tcp.stop()


@pytest.fixture
async def proxied(settings: Settings, proxy: TcpProxy, database_url: str) -> AsyncIterator[Client]:
    parts = urlsplit(database_url)
    through_proxy = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
    proxied_settings = Settings(database_url=through_proxy, admin_token=settings.admin_token)
    async with running(create_app(services=build_services(proxied_settings))) as test_client:
        yield test_client


async def _ready_tenant(client: Client) -> TenantFixture:
    tenant = await new_tenant(client)
    registered = await client.post(
        "/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth
    )
    assert registered.status_code == 201
    return tenant


def _rows(sql: psycopg.Connection[Any], tenant: str, key: str) -> int:
    found = sql.execute(
        "SELECT count(*) FROM outbox WHERE tenant_id = %s AND idempotency_key = %s", (tenant, key)
    ).fetchone()
    assert found is not None
    return int(found[0])


async def test_database_down_is_503_and_recovers(proxied: Client, proxy: TcpProxy, sql: Any) -> None:
    tenant = await _ready_tenant(proxied)
    before = await proxied.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": "before"})
    assert before.status_code == 202

    await proxy.stop()
    key = secrets.token_hex(8)
    down = await proxied.post("/v1/events", json=order(2), headers={**tenant.auth, "Idempotency-Key": key})
    assert down.status_code == 503
    assert down.headers["Retry-After"] == "1"
    assert down.headers["content-type"].startswith("application/problem+json")
    assert _rows(sql, tenant.id, key) == 0
    assert (await proxied.get("/readyz")).status_code == 503
    assert (await proxied.get(before.headers["Location"], headers=tenant.auth)).status_code == 503
    assert (await proxied.get("/healthz")).status_code == 200

    await proxy.start()
    retried = await proxied.post("/v1/events", json=order(2), headers={**tenant.auth, "Idempotency-Key": key})
    assert retried.status_code == 202
    assert (await proxied.get("/readyz")).status_code == 200
    assert _rows(sql, tenant.id, key) == 1


async def test_cut_mid_flight_never_202_without_its_row(proxied: Client, proxy: TcpProxy, sql: Any) -> None:
    tenant = await _ready_tenant(proxied)
    keys = [secrets.token_hex(8) for _ in range(40)]

    async def publish(key: str, delay: float) -> int:
        await asyncio.sleep(delay)
        response = await proxied.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
        return response.status_code

    async def cut() -> None:
        await asyncio.sleep(0.05)
        await proxy.stop()

    results = await asyncio.gather(*(publish(k, i * 0.0025) for i, k in enumerate(keys)), cut())
    statuses = dict(zip(keys, results[:-1], strict=True))
    assert set(statuses.values()) <= {202, 503}, statuses
    assert 503 in statuses.values()
    for key, status in statuses.items():
        if status == 202:
            assert _rows(sql, tenant.id, key) == 1, key

    # Clients retry what got 503 with the same key: each ends with exactly one event.
    await proxy.start()
    for key, status in statuses.items():
        if status == 503:
            retried = await proxied.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
            assert retried.status_code == 202
    assert all(_rows(sql, tenant.id, key) == 1 for key in keys)
