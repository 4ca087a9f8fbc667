"""Per-tenant rate limits: token buckets in the real Redis, shared by replicas, set per tenant by the
admin, 429 + Retry-After when exceeded, and ingest that goes on when Redis is gone (fail open)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from tests.conftest import ADMIN, ADMIN_TOKEN, ORDER_SCHEMA, TenantFixture, idem, new_tenant, order
from tests.support.asgi import running
from tests.support.proxy import TcpProxy

MAX_BATCH = 10
MAX_BODY = 4000

Replica = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def replica(database_url: str, redis_url: str) -> Replica:
    """An API replica (its own services, caches and leases) on the shared database and Redis."""

    def start(**overrides: Any) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        settings = Settings(
            **{
                "database_url": database_url,
                "admin_token": ADMIN_TOKEN,
                "redis_url": redis_url,
                "max_batch_events": MAX_BATCH,
                "max_body_bytes": MAX_BODY,
                **overrides,
            }
        )
        return running(create_app(services=build_services(settings)))

    return start


@pytest.fixture
async def api(replica: Replica) -> AsyncIterator[httpx.AsyncClient]:
    async with replica() as client:
        yield client


async def _tenant(client: httpx.AsyncClient, **limits: int | None) -> TenantFixture:
    found = await new_tenant(client)
    registered = await client.post(
        "/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=found.auth
    )
    assert registered.status_code == 201
    if limits:
        response = await client.put(f"/v1/tenants/{found.id}/rate-limits", json=limits, headers=ADMIN)
        assert response.status_code == 200, response.text
    return found


def _batch(n: int) -> dict[str, Any]:
    return {"events": [order(i) for i in range(n)]}


async def test_over_the_event_rate_gets_429_with_retry_after_and_stores_nothing(api: httpx.AsyncClient) -> None:
    tenant = await _tenant(api, events_per_second=1)
    # The bucket holds max(2 s of rate, one largest batch) = 10 events, and gets one back per second.
    full = await api.post("/v1/events/batch", json=_batch(MAX_BATCH), headers={**tenant.auth, **idem()})
    assert full.status_code == 202, full.text
    refused = await api.post("/v1/events", json=order(99), headers={**tenant.auth, **idem("over")})
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/rate-limited")
    assert "1 events/s" in refused.json()["detail"]
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 2
    assert (await api.get("/v1/events", params={"idempotency_key": "over"}, headers=tenant.auth)).status_code == 404
    await asyncio.sleep(retry_after)
    again = await api.post("/v1/events", json=order(99), headers={**tenant.auth, **idem("over")})
    assert again.status_code == 202, again.text


async def test_batches_count_their_events_and_the_byte_rate_applies(api: httpx.AsyncClient) -> None:
    by_events = await _tenant(api, events_per_second=6)  # bucket: max(12, 10) = 12 events
    assert (await api.post("/v1/events/batch", json=_batch(8), headers={**by_events.auth, **idem()})).status_code == 202
    over = await api.post("/v1/events/batch", json=_batch(8), headers={**by_events.auth, **idem()})
    assert over.status_code == 429
    by_bytes = await _tenant(api, bytes_per_second=200)  # bucket: max(400, MAX_BODY) = 4000 bytes
    body = order(1, partition_key="k" * 900)  # about 1 KB
    statuses = [
        (await api.post("/v1/events", json=body, headers={**by_bytes.auth, **idem()})).status_code for _ in range(5)
    ]
    assert statuses[:3] == [202, 202, 202]
    assert statuses[-1] == 429
    assert "200 bytes/s" in (await api.post("/v1/events", json=body, headers={**by_bytes.auth, **idem()})).text


async def test_one_tenant_over_its_limit_does_not_slow_another(api: httpx.AsyncClient) -> None:
    noisy = await _tenant(api, events_per_second=5)
    quiet = await _tenant(api, events_per_second=5)
    await api.post("/v1/events/batch", json=_batch(MAX_BATCH), headers={**noisy.auth, **idem()})
    assert (
        await api.post("/v1/events/batch", json=_batch(MAX_BATCH), headers={**noisy.auth, **idem()})
    ).status_code == 429
    assert (await api.post("/v1/events", json=order(1), headers={**quiet.auth, **idem()})).status_code == 202


async def test_replicas_share_one_bucket(replica: Replica) -> None:
    async with replica() as one, replica() as two:
        tenant = await _tenant(one, events_per_second=5)
        for i in range(5):  # 10 events, half through each replica
            client = one if i % 2 else two
            response = await client.post("/v1/events/batch", json=_batch(2), headers={**tenant.auth, **idem()})
            assert response.status_code == 202, response.text
        # A full batch needs 10 tokens: 2 s of refill, far more than the requests above took.
        for client in (two, one):
            over = await client.post("/v1/events/batch", json=_batch(MAX_BATCH), headers={**tenant.auth, **idem()})
            assert over.status_code == 429


async def test_admin_sets_limits_per_tenant_over_the_environment_default(replica: Replica) -> None:
    async with replica(rate_limit_events_per_second=3, rate_limit_bytes_per_second=0) as api:
        tenant = await _tenant(api)
        url = f"/v1/tenants/{tenant.id}/rate-limits"
        shown = (await api.get(url, headers=ADMIN)).json()
        assert shown == {
            "tenant": tenant.id,
            "events_per_second": None,
            "bytes_per_second": None,
            "effective_events_per_second": 3,
            "effective_bytes_per_second": 0,
        }
        # The default applies (bucket max(6, 10) = 10 events) ...
        assert (await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})).is_success
        over = await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})
        assert over.status_code == 429
        # ... until the admin lifts it for this tenant (0: unlimited), effective at once on this replica.
        lifted = await api.put(url, json={"events_per_second": 0}, headers=ADMIN)
        assert lifted.json()["effective_events_per_second"] == 0
        for _ in range(3):
            assert (await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})).is_success
        assert (await api.put(url, json={"events_per_second": -1}, headers=ADMIN)).status_code == 422
        assert (await api.put(url, json={"events_per_minute": 1}, headers=ADMIN)).status_code == 422
        assert (await api.put(url, json={}, headers=tenant.auth)).status_code == 403
        assert (await api.put("/v1/tenants/no-such/rate-limits", json={}, headers=ADMIN)).status_code == 404
        reset = await api.put(url, json={"events_per_second": None}, headers=ADMIN)
        assert reset.json()["effective_events_per_second"] == 3


async def test_redis_down_means_ingest_goes_on_and_limits_return_with_it(
    replica: Replica, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    proxy = TcpProxy(host, int(port))
    await proxy.start()
    try:
        async with replica(redis_url=f"redis://127.0.0.1:{proxy.port}/0") as api:
            tenant = await _tenant(api, events_per_second=5)
            await proxy.stop()
            with caplog.at_level(logging.WARNING, logger="events_api.ratelimit"):
                for _ in range(3):  # 30 events at a limit of 5/s: accepted, since the limits cannot be checked
                    response = await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})
                    assert response.status_code == 202, response.text
            assert "Redis unavailable" in caplog.text
            assert len([r for r in caplog.records if "Redis unavailable" in r.message]) == 1  # not once per request
            await proxy.start()
            await asyncio.sleep(1.1)  # the limiter leaves Redis alone for a second after a failure
            statuses = [
                (await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})).status_code
                for _ in range(2)
            ]
            assert statuses == [202, 429]
    finally:
        await proxy.stop()


async def test_without_redis_there_are_no_limits(replica: Replica) -> None:
    async with replica(redis_url=None, rate_limit_events_per_second=1) as api:
        tenant = await _tenant(api)
        for _ in range(3):
            assert (await api.post("/v1/events/batch", json=_batch(10), headers={**tenant.auth, **idem()})).is_success
