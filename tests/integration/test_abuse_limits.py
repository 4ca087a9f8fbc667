"""Abuse limits on the real server (`events-api serve`, READ_TIMEOUT of 1 s): oversized headers, too many
headers, a request line or headers that trickle in, a body that trickles in, deep or wide payloads. Each
gets a clear problem+json 4xx, and the server goes on serving."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from events_api.limits import MAX_PAYLOAD_DEPTH, MAX_REQUEST_HEADER_BYTES, MAX_REQUEST_HEADERS
from tests.conftest import ADMIN, ALL_SCOPES, ORDER_SCHEMA, serving

READ_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def guarded(database_url: str) -> Iterator[str]:
    with serving(database_url, workers=1, read_timeout="1s") as base:
        yield base


@pytest.fixture(scope="module")
def key(guarded: str) -> str:
    tenant = "abuse-" + str(int(time.time() * 1000))[-8:]
    with httpx.Client(base_url=guarded, headers=ADMIN) as http:
        assert http.post("/v1/tenants", json={"id": tenant}).status_code == 201
        created: str = http.post(f"/v1/tenants/{tenant}/api-keys", json={"scopes": ALL_SCOPES}).json()["key"]
        schema = {**ORDER_SCHEMA, "additionalProperties": True}
        auth = {"Authorization": f"Bearer {created}"}
        assert http.post("/v1/schemas/order.created/versions", json={"schema": schema}, headers=auth).is_success
    return created


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Everything until the server closes the connection, parsed as one HTTP response."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _assert_problem(status: int, headers: dict[str, str], body: bytes, expected: int) -> dict[str, Any]:
    assert status == expected, body
    assert headers["content-type"] == "application/problem+json"
    assert headers.get("connection") == "close"
    problem: dict[str, Any] = json.loads(body)
    assert problem["status"] == expected
    return problem


def test_oversized_and_too_many_headers_get_431(guarded: str) -> None:
    big = httpx.get(f"{guarded}/healthz", headers={"X-Big": "a" * MAX_REQUEST_HEADER_BYTES})
    assert big.status_code == 431
    assert big.headers["content-type"] == "application/problem+json"
    assert big.json()["type"].endswith("/request-header-fields-too-large")
    many = httpx.get(f"{guarded}/healthz", headers={f"X-{i}": "a" for i in range(MAX_REQUEST_HEADERS + 1)})
    assert many.status_code == 431
    assert httpx.get(f"{guarded}/healthz", headers={"X-Fine": "a" * 4000}).status_code == 200


def test_a_request_line_and_headers_that_trickle_in_are_cut_off(guarded: str) -> None:
    with _connect(guarded) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # ... and never the blank line
        problem = _assert_problem(*_read_response(sock), 408)
        assert time.monotonic() - started < READ_TIMEOUT + 5
    assert "headers" in problem["detail"]
    with _connect(guarded) as sock:  # a connection that sends nothing at all is closed as well
        _assert_problem(*_read_response(sock), 408)


def test_a_body_that_trickles_in_is_cut_off_and_stores_nothing(guarded: str, key: str) -> None:
    body = json.dumps({"event_type": "order.created", "payload": {"order_id": "slow", "amount": 1}}).encode()
    with _connect(guarded) as sock:
        sock.sendall(
            b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {key}\r\nIdempotency-Key: slow-body\r\n".encode()
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        problem = _assert_problem(*_read_response(sock), 408)
    assert "body" in problem["detail"]
    found = httpx.get(f"{guarded}/v1/events", params={"idempotency_key": "slow-body"}, headers=_auth(key))
    assert found.status_code == 404


def test_keep_alive_still_works_between_requests(guarded: str) -> None:
    with httpx.Client(base_url=guarded) as http:
        assert http.get("/healthz").status_code == 200
        time.sleep(READ_TIMEOUT / 2)
        assert http.get("/healthz").status_code == 200


def test_deep_and_wide_payloads_get_422_with_pointers(guarded: str, key: str) -> None:
    deep: dict[str, Any] = {"order_id": "o", "amount": 1}
    nested: dict[str, Any] = {}
    for _ in range(MAX_PAYLOAD_DEPTH):
        nested = {"n": nested}
    deep["nested"] = nested
    response = httpx.post(
        f"{guarded}/v1/events",
        json={"event_type": "order.created", "payload": deep},
        headers={**_auth(key), "Idempotency-Key": "deep"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["pointer"].startswith("/payload/nested/n/n")
    wide = {"order_id": "o", "amount": 1, "tags": list(range(10_001))}
    response = httpx.post(
        f"{guarded}/v1/events",
        json={"event_type": "order.created", "payload": wide},
        headers={**_auth(key), "Idempotency-Key": "wide"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["pointer"] == "/payload/tags"
    assert httpx.get(f"{guarded}/healthz").status_code == 200


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
