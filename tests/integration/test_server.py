"""Against the real thing: `events-api serve --workers 2` as a subprocess."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from tests.conftest import order


def test_health_and_openapi(server: str) -> None:
    assert httpx.get(f"{server}/healthz").json() == {"status": "ok", "checks": {}}
    ready = httpx.get(f"{server}/readyz")
    assert ready.status_code == 200
    document = httpx.get(f"{server}/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    assert "/v1/events" in document["paths"]


async def test_concurrent_same_key_across_workers(server: str, live_tenant: dict[str, str], sql: Any) -> None:
    key = secrets.token_hex(8)
    headers = {"Authorization": live_tenant["Authorization"], "Idempotency-Key": key}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=server, limits=limits, timeout=30) as http:
        responses = await asyncio.gather(*(http.post("/v1/events", json=order(1), headers=headers) for _ in range(64)))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {202, 409}, statuses
    assert len({r.json()["event_id"] for r in responses if r.status_code == 202}) == 1
    count = sql.execute(
        "SELECT count(*) FROM outbox WHERE tenant_id = %s AND idempotency_key = %s", (live_tenant["tenant"], key)
    ).fetchone()
    assert count == (1,)


def test_body_limit_applies_while_streaming(server: str, live_tenant: dict[str, str]) -> None:
    """A chunked upload (no Content-Length) is cut off at EVENTS_API_MAX_BODY_BYTES."""
    headers = {
        "Authorization": live_tenant["Authorization"],
        "Idempotency-Key": secrets.token_hex(8),
        "Content-Type": "application/json",
    }

    def chunks() -> Iterator[bytes]:
        yield b'{"event_type": "order.created", "payload": {"order_id": "'
        for _ in range(40):
            yield b"x" * 4096
        yield b'", "amount": 1}}'

    response = httpx.post(f"{server}/v1/events", content=chunks(), headers=headers)
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")
    declared = httpx.post(f"{server}/v1/events", content=b"x" * 70000, headers=headers)
    assert declared.status_code == 413


def test_unknown_routes_and_methods_are_problems(server: str) -> None:
    missing = httpx.get(f"{server}/v1/nothing-here")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    wrong_method = httpx.put(f"{server}/v1/events")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["status"] == 405


def test_every_undocumented_method_is_405_with_allow(server: str) -> None:
    """What schemathesis's unsupported_method check (ST205) asks, for every path of the document. OPTIONS
    is answered (204 with Allow), as RFC 9110 describes it; it is not an operation of the API."""
    paths: dict[str, Any] = httpx.get(f"{server}/openapi.json").json()["paths"]
    for path, item in paths.items():
        url = server + path.format(tenant="acme", key_id="key_0", event_type="a", version="1", event_id="evt_0")
        documented = {method.upper() for method in item}
        for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - documented):
            response = httpx.request(method, url)
            assert response.status_code == 405, (method, path)
            assert response.headers["content-type"] == "application/problem+json"
            assert documented <= {m.strip() for m in response.headers["allow"].split(",")}, (method, path)
        options = httpx.options(url)
        assert options.status_code == 204
        assert documented <= {m.strip() for m in options.headers["allow"].split(",")}


def test_migrate_command(database_url: str) -> None:
    env = {**os.environ, "EVENTS_API_DATABASE_URL": database_url}
    result = subprocess.run(
        [sys.executable, "-m", "events_api", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout
