"""No key, token or payload ever reaches the logs, including on the error paths."""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from tests.conftest import ADMIN, ADMIN_TOKEN, ORDER_SCHEMA, new_tenant
from tests.support.asgi import running
from tests.support.proxy import TcpProxy


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(database_url)
    tcp = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await tcp.start()
    yield tcp
    await tcp.stop()


async def test_secrets_and_payloads_stay_out_of_the_logs(
    database_url: str, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    parts = urlsplit(database_url)
    url = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
    marker = "payload-marker-" + secrets.token_hex(8)
    caplog.set_level(logging.DEBUG)
    async with running(create_app(services=build_services(Settings(database_url=url, admin_token=ADMIN_TOKEN)))) as api:
        tenant = await new_tenant(api)
        await api.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
        body = {"event_type": "order.created", "payload": {"order_id": marker, "amount": 1}}
        assert (
            await api.post("/v1/events", json=body, headers={**tenant.auth, "Idempotency-Key": marker})
        ).status_code == 202
        invalid = {"event_type": "order.created", "payload": {"order_id": marker, "amount": -1}}
        await api.post("/v1/events", json=invalid, headers={**tenant.auth, "Idempotency-Key": "x" + marker})
        await api.post("/v1/events", json=body, headers={"Authorization": "Bearer evk_" + "a" * 16 + "_" + "0" * 64})
        await api.post("/v1/tenants", json={"id": "nope"}, headers={"Authorization": "Bearer wrong-" + ADMIN_TOKEN})
        await proxy.stop()  # the database goes away: storage warnings are logged
        down = await api.post("/v1/events", json=body, headers={**tenant.auth, "Idempotency-Key": "y" + marker})
        assert down.status_code == 503
        await proxy.start()
        await api.get("/v1/tenants/" + tenant.id + "/routing", headers=ADMIN)
    text = "\n".join(
        f"{r.getMessage()} {r.exc_text or ''} {r.args!r} {getattr(r, 'fields', '')!r}" for r in caplog.records
    )
    assert any(r.name == "events_api.access" for r in caplog.records), "the access lines are checked too"
    assert any(r.levelno >= logging.WARNING for r in caplog.records), "the outage should have been logged"
    secret = tenant.key.split("_", 2)[2]
    for needle in (ADMIN_TOKEN, tenant.key, secret, marker, "0" * 64):
        assert needle not in text, f"{needle[:12]}… appears in the logs"
