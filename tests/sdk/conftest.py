"""Fixtures of the SDK tests. They run against the real server (`server` in the root conftest); each test
gets a tenant of its own. Scenarios run with both clients: the async one directly, the sync one from a
worker thread (`Threaded`), so that one test body covers both and they cannot drift apart."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from events_api_client import AsyncEventsClient, EventsClient, RetryPolicy

from tests.conftest import ADMIN, ALL_SCOPES, ORDER_SCHEMA

#: Retries fast enough for tests, with the same shape as the defaults.
FAST = RetryPolicy(max_attempts=5, initial_backoff=0.01, max_backoff=0.05, total_timeout=10)


@dataclass(frozen=True)
class Tenant:
    id: str
    key: str


def create_tenant(
    base_url: str, scopes: list[str] | None = None, schemas: dict[str, dict[str, Any]] | None = None
) -> Tenant:
    """A new tenant with a key (all scopes unless told) and its schemas (`order.created` unless told)."""
    tenant_id = "sdk-" + secrets.token_hex(5)
    with httpx.Client(base_url=base_url, headers=ADMIN) as http:
        assert http.post("/v1/tenants", json={"id": tenant_id}).status_code == 201
        created = http.post(f"/v1/tenants/{tenant_id}/api-keys", json={"scopes": ALL_SCOPES, "name": "sdk"})
        key = created.json()["key"]
        auth = {"Authorization": f"Bearer {key}"}
        for event_type, schema in (schemas if schemas is not None else {"order.created": ORDER_SCHEMA}).items():
            registered = http.post(f"/v1/schemas/{event_type}/versions", json={"schema": schema}, headers=auth)
            assert registered.status_code == 201, registered.text
        if scopes is not None:
            key = http.post(f"/v1/tenants/{tenant_id}/api-keys", json={"scopes": scopes}).json()["key"]
    return Tenant(tenant_id, key)


@pytest.fixture
def api_tenant(server: str) -> Tenant:
    return create_tenant(server)


def stored_events(sql: psycopg.Connection[Any], tenant_id: str) -> int:
    """How many events the server stored for a tenant (read from its outbox, whatever any API says)."""
    row = sql.execute("SELECT count(*) FROM outbox WHERE tenant_id = %s", (tenant_id,)).fetchone()
    assert row is not None
    return int(row[0])


def order(n: int, **payload: Any) -> dict[str, Any]:
    return {"order_id": f"o-{n}", "amount": n, **payload}


class Threaded:
    """The sync client driven from worker threads: every method becomes awaitable, properties stay plain."""

    def __init__(self, client: EventsClient) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(attribute, *args, **kwargs)

        return call


AnyClient = AsyncEventsClient | Threaded
Opener = Callable[..., AbstractAsyncContextManager[AnyClient]]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    return param


@pytest.fixture
def open_client(flavour: str) -> Opener:
    """`async with open_client(url, key, **options) as client`: the flavour's client, fast retries by default."""

    @asynccontextmanager
    async def opener(base_url: str, api_key: str, **options: Any) -> AsyncIterator[AnyClient]:
        options.setdefault("retry", FAST)
        if flavour == "async":
            async with AsyncEventsClient(base_url, api_key, **options) as client:
                yield client
            return
        sync_client = await asyncio.to_thread(EventsClient, base_url, api_key, **options)
        try:
            yield Threaded(sync_client)
        finally:
            await asyncio.to_thread(sync_client.close)

    return opener


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait until `check()` holds (background work: a flusher, a relay)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
