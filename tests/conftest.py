"""Shared fixtures. Tests talk to the real PostgreSQL (one freshly migrated database per test run)
and isolate their data by tenant: every test gets its own tenant id."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from events_api.storage.migrate import migrate
from tests.support.asgi import running

ADMIN_TOKEN = "test-admin-token-" + secrets.token_hex(8)
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ALL_SCOPES = ["events:publish", "events:read", "schemas:write", "dead-letters:manage"]
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
    },
    "required": ["order_id", "amount"],
}


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """A new database on the test server, migrated to head, dropped afterwards."""
    admin_url = os.environ.get("EVENTS_API_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_database(admin_url, name)
    try:
        migrate(Settings(database_url=url).sqlalchemy_url, now=datetime.now(UTC), partitions_ahead_days=3)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """The database this test run shares (each test isolates its data by tenant)."""
    with fresh_database("events_api_test") as url:
        yield url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, admin_token=ADMIN_TOKEN, db_pool_size=10)


@pytest.fixture
def sql(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection for checking what the service stored."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running(create_app(services=build_services(settings))) as test_client:
        yield test_client


@dataclass
class TenantFixture:
    id: str
    key: str
    key_id: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def new_tenant(client: httpx.AsyncClient, scopes: list[str] | None = None) -> TenantFixture:
    tenant_id = "t-" + secrets.token_hex(6)
    response = await client.post("/v1/tenants", json={"id": tenant_id}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return TenantFixture(tenant_id, *await new_key(client, tenant_id, scopes or ALL_SCOPES))


async def new_key(client: httpx.AsyncClient, tenant_id: str, scopes: list[str]) -> tuple[str, str]:
    response = await client.post(
        f"/v1/tenants/{tenant_id}/api-keys", json={"scopes": scopes, "name": "test"}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    return response.json()["key"], response.json()["id"]


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> TenantFixture:
    """A tenant with an all-scopes key and the `order.created` schema registered."""
    found = await new_tenant(client)
    response = await client.post(
        "/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=found.auth
    )
    assert response.status_code == 201, response.text
    return found


def order(n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"event_type": "order.created", "payload": {"order_id": f"o-{n}", "amount": n}, **extra}


def idem(key: str | None = None) -> dict[str, str]:
    return {"Idempotency-Key": key or secrets.token_hex(12)}


# --- the real server: `events-api serve --workers 2` as a subprocess, shared by the session ---------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(database_url: str, workers: int = 2, *, log: Path | None = None, **env: str) -> Iterator[str]:
    """`events-api serve` as a subprocess on a free port; yields its base URL. `env`: more EVENTS_API_*.
    Its stderr goes to `log` (kept), else to a temporary file; either is checked for tracebacks at the end.
    (A file, not a pipe: the server logs a line per request, and a pipe nobody reads fills up and stalls it.)"""
    port = free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        "EVENTS_API_DATABASE_URL": database_url,
        "EVENTS_API_ADMIN_TOKEN": ADMIN_TOKEN,
        **{f"EVENTS_API_{name.upper()}": value for name, value in env.items()},
    }
    with log.open("w+b") if log else tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "events_api", "serve", "--port", str(port), "--workers", str(workers)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=output,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            else:
                output.seek(0)
                raise AssertionError("events-api serve did not become ready:\n" + output.read().decode())
            yield base
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
            output.seek(0)
            written = output.read()
            assert b"Traceback" not in written, written.decode()


@pytest.fixture(scope="session")
def server(database_url: str) -> Iterator[str]:
    """The real server shared by the session (2 workers)."""
    with serving(database_url, max_body_bytes="65536") as base:
        yield base


@pytest.fixture(scope="session")
def live_tenant(server: str) -> dict[str, str]:
    tenant_id = "live-" + secrets.token_hex(4)
    with httpx.Client(base_url=server, headers=ADMIN) as http:
        assert http.post("/v1/tenants", json={"id": tenant_id}).status_code == 201
        key = http.post(f"/v1/tenants/{tenant_id}/api-keys", json={"scopes": ALL_SCOPES}).json()["key"]
        auth = {"Authorization": f"Bearer {key}"}
        registered = http.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=auth)
        assert registered.status_code == 201
    return {"tenant": tenant_id, **auth}


@pytest.fixture(scope="session")
def redis_url() -> str:
    return os.environ.get("EVENTS_API_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
