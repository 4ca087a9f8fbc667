"""POST /v1/events and /v1/events/batch: durability, idempotency, validation, limits, status."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import psycopg
import pytest

from events_api.http.app import build_services, create_app
from events_api.lanes import lane_for
from events_api.settings import Settings
from tests.conftest import ORDER_SCHEMA, TenantFixture, idem, new_tenant, order
from tests.support.asgi import running

Client = httpx.AsyncClient


def _outbox(sql: psycopg.Connection[Any], tenant: str, key: str) -> list[tuple[Any, ...]]:
    return sql.execute(
        "SELECT event_id, event_type, partition_key, lane, payload, state, schema_version FROM outbox "
        "WHERE tenant_id = %s AND idempotency_key = %s ORDER BY seq",
        (tenant, key),
    ).fetchall()


async def test_accepted_event_is_committed_before_the_202(
    client: Client, tenant: TenantFixture, sql: psycopg.Connection[Any]
) -> None:
    key = secrets.token_hex(8)
    event = order(
        7, partition_key="order-7", headers={"source-app": "checkout"}, occurred_at="2026-11-20T10:00:00+01:00"
    )
    response = await client.post("/v1/events", json=event, headers={**tenant.auth, "Idempotency-Key": key})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "accepted"
    assert body["event_id"].startswith("evt_")
    assert (body["event_type"], body["schema_version"]) == ("order.created", 1)
    assert response.headers["Location"] == f"/v1/events/{body['event_id']}"
    assert "Idempotent-Replayed" not in response.headers

    rows = _outbox(sql, tenant.id, key)
    assert len(rows) == 1
    event_id, event_type, partition_key, lane, payload, state, version = rows[0]
    assert (event_id, event_type, partition_key, state, version) == (
        body["event_id"],
        "order.created",
        "order-7",
        "pending",
        1,
    )
    assert lane == lane_for(tenant.id, "order-7")
    assert msgspec.json.decode(bytes(payload)) == {"order_id": "o-7", "amount": 7}


async def test_replay_returns_the_original(client: Client, tenant: TenantFixture, sql: psycopg.Connection[Any]) -> None:
    key = secrets.token_hex(8)
    first = await client.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
    # Same request again, and with the key in RFC 8941 quoted form, and with members in another order.
    reordered = {"payload": {"amount": 1, "order_id": "o-1"}, "event_type": "order.created"}
    for headers, body in [
        ({"Idempotency-Key": key}, order(1)),
        ({"Idempotency-Key": f'"{key}"'}, order(1)),
        ({"Idempotency-Key": key}, reordered),
    ]:
        again = await client.post("/v1/events", json=body, headers={**tenant.auth, **headers})
        assert again.status_code == 202
        assert again.content == first.content
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.headers["Location"] == first.headers["Location"]
    assert len(_outbox(sql, tenant.id, key)) == 1


async def test_same_key_different_request_is_422(client: Client, tenant: TenantFixture, sql: Any) -> None:
    key = secrets.token_hex(8)
    assert (
        await client.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
    ).status_code == 202
    for different in [order(2), order(1, partition_key="p"), order(1, headers={"h": "v"})]:
        response = await client.post("/v1/events", json=different, headers={**tenant.auth, "Idempotency-Key": key})
        assert response.status_code == 422
        assert response.json()["type"].endswith("/idempotency-key-reused")
    # The batch endpoint is another operation: reusing a single event's key there is refused too.
    batch = await client.post(
        "/v1/events/batch", json={"events": [order(1)]}, headers={**tenant.auth, "Idempotency-Key": key}
    )
    assert batch.status_code == 422
    assert len(_outbox(sql, tenant.id, key)) == 1


@pytest.mark.parametrize("header", [None, "", "x" * 256, '"unterminated', "bad\x7fchar"])
async def test_missing_or_malformed_key_is_400(client: Client, tenant: TenantFixture, header: str | None) -> None:
    headers = dict(tenant.auth)
    if header is not None:
        headers["Idempotency-Key"] = header
    response = await client.post("/v1/events", json=order(), headers=headers)
    assert response.status_code == 400
    assert response.json()["type"].endswith("/invalid-idempotency-key")


async def test_a_failed_request_does_not_use_up_its_key(client: Client, tenant: TenantFixture) -> None:
    key = secrets.token_hex(8)
    invalid = await client.post(
        "/v1/events", json=order(1) | {"payload": {"amount": -1}}, headers={**tenant.auth, "Idempotency-Key": key}
    )
    assert invalid.status_code == 422
    fixed = await client.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
    assert fixed.status_code == 202


async def test_64_concurrent_requests_with_one_key_store_one_event(
    client: Client, tenant: TenantFixture, sql: psycopg.Connection[Any]
) -> None:
    key = secrets.token_hex(8)
    responses = await asyncio.gather(
        *(client.post("/v1/events", json=order(5), headers={**tenant.auth, "Idempotency-Key": key}) for _ in range(64))
    )
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {202, 409}, statuses
    accepted = [r for r in responses if r.status_code == 202]
    assert len({r.json()["event_id"] for r in accepted}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in accepted) == 1
    assert len(_outbox(sql, tenant.id, key)) == 1


async def test_concurrent_different_bodies_with_one_key(client: Client, tenant: TenantFixture, sql: Any) -> None:
    key = secrets.token_hex(8)
    responses = await asyncio.gather(
        *(client.post("/v1/events", json=order(n), headers={**tenant.auth, "Idempotency-Key": key}) for n in range(16))
    )
    assert sorted(r.status_code for r in responses).count(202) == 1
    assert {r.status_code for r in responses} <= {202, 409, 422}
    assert len(_outbox(sql, tenant.id, key)) == 1


async def test_schema_violations_list_every_error_with_pointers(client: Client, tenant: TenantFixture) -> None:
    response = await client.post(
        "/v1/events",
        json={"event_type": "order.created", "payload": {"amount": -5, "currency": "GBP"}},
        headers={**tenant.auth, **idem()},
    )
    assert response.status_code == 422
    pointers = {e["pointer"] for e in response.json()["errors"]}
    assert pointers == {"/payload/amount", "/payload/currency", "/payload/order_id"}
    assert all(e["message"] for e in response.json()["errors"])

    unknown = await client.post(
        "/v1/events", json={"event_type": "no.such", "payload": {}}, headers={**tenant.auth, **idem()}
    )
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["pointer"] == "/event_type"


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"event_type": "order.created"}, "/payload"),
        ({"event_type": "order.created", "payload": {}, "extra": 1}, "/extra"),
        ({"event_type": "order.created", "payload": {}, "headers": {"ce_id": "x"}}, "/headers/ce_id"),
        ({"event_type": "order.created", "payload": {}, "partition_key": ""}, "/partition_key"),
        ({"event_type": "order.created", "payload": {}, "occurred_at": "yesterday"}, "/occurred_at"),
    ],
)
async def test_malformed_events_are_422(
    client: Client, tenant: TenantFixture, body: dict[str, Any], pointer: str
) -> None:
    response = await client.post("/v1/events", json=body, headers={**tenant.auth, **idem()})
    assert response.status_code == 422, response.text
    assert pointer in [e["pointer"] for e in response.json()["errors"]]


async def test_not_json_is_400(client: Client, tenant: TenantFixture) -> None:
    response = await client.post(
        "/v1/events", content=b"{not json", headers={**tenant.auth, **idem(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400


async def test_batch_is_all_or_nothing(client: Client, tenant: TenantFixture, sql: psycopg.Connection[Any]) -> None:
    key = secrets.token_hex(8)
    events = [order(n, partition_key=f"k{n % 3}") for n in range(10)]
    events[3] = order(3) | {"payload": {"order_id": "o-3", "amount": "lots"}}
    events[7] = order(7) | {"payload": {"order_id": 7, "amount": 7}}
    rejected = await client.post(
        "/v1/events/batch", json={"events": events}, headers={**tenant.auth, "Idempotency-Key": key}
    )
    assert rejected.status_code == 422
    assert [e["pointer"] for e in rejected.json()["errors"]] == [
        "/events/3/payload/amount",
        "/events/7/payload/order_id",
    ]
    assert _outbox(sql, tenant.id, key) == []

    events[3], events[7] = order(3, partition_key="k0"), order(7, partition_key="k1")
    accepted = await client.post(
        "/v1/events/batch", json={"events": events}, headers={**tenant.auth, "Idempotency-Key": key}
    )
    assert accepted.status_code == 202
    ids = [e["event_id"] for e in accepted.json()["events"]]
    assert len(set(ids)) == 10
    rows = _outbox(sql, tenant.id, key)
    # Stored in request order (sequence order is the relay's publishing order).
    assert [r[0] for r in rows] == ids
    replay = await client.post(
        "/v1/events/batch", json={"events": events}, headers={**tenant.auth, "Idempotency-Key": key}
    )
    assert replay.content == accepted.content
    assert replay.headers["Idempotent-Replayed"] == "true"

    found = await client.get("/v1/events", params={"idempotency_key": key}, headers=tenant.auth)
    assert [e["event_id"] for e in found.json()["events"]] == ids


async def test_batch_limits(client: Client, settings: Settings) -> None:
    tenant = await new_tenant(client)
    await client.post("/v1/schemas/t/versions", json={"schema": {"type": "object"}}, headers=tenant.auth)
    too_many = {"events": [{"event_type": "t", "payload": {}}] * (settings.max_batch_events + 1)}
    response = await client.post("/v1/events/batch", json=too_many, headers={**tenant.auth, **idem()})
    assert response.status_code == 422
    empty = await client.post("/v1/events/batch", json={"events": []}, headers={**tenant.auth, **idem()})
    assert empty.status_code == 422


async def test_cloudevents_structured_mode(client: Client, tenant: TenantFixture, sql: psycopg.Connection[Any]) -> None:
    key = secrets.token_hex(8)
    cloudevent = {
        "specversion": "1.0",
        "id": "abc-1",
        "source": "/checkout",
        "type": "order.created",
        "partitionkey": "order-9",
        "time": "2026-11-21T08:00:00Z",
        "data": {"order_id": "o-9", "amount": 9},
    }
    headers = {**tenant.auth, "Idempotency-Key": key, "Content-Type": "application/cloudevents+json"}
    response = await client.post("/v1/events", content=msgspec.json.encode(cloudevent), headers=headers)
    assert response.status_code == 202, response.text
    row = _outbox(sql, tenant.id, key)[0]
    assert (row[1], row[2]) == ("order.created", "order-9")

    invalid = {**cloudevent, "data": {"order_id": "o-9", "amount": -1}}
    headers["Idempotency-Key"] = secrets.token_hex(8)
    rejected = await client.post("/v1/events", content=msgspec.json.encode(invalid), headers=headers)
    assert rejected.status_code == 422
    assert rejected.json()["errors"][0]["pointer"] == "/data/amount"


async def test_content_type_and_size_limits(client: Client, tenant: TenantFixture, settings: Settings) -> None:
    wrong = await client.post(
        "/v1/events", content=b"event_type=x", headers={**tenant.auth, **idem(), "Content-Type": "text/plain"}
    )
    assert wrong.status_code == 415
    none = await client.post("/v1/events", content=b"{}", headers={**tenant.auth, **idem(), "Content-Type": ""})
    assert none.status_code == 415

    big = msgspec.json.encode(order(1) | {"payload": {"order_id": "x" * settings.max_body_bytes, "amount": 1}})
    declared = await client.post(
        "/v1/events", content=big, headers={**tenant.auth, **idem(), "Content-Type": "application/json"}
    )
    assert declared.status_code == 413


async def test_event_status(client: Client, tenant: TenantFixture) -> None:
    key = secrets.token_hex(8)
    published = await client.post("/v1/events", json=order(3), headers={**tenant.auth, "Idempotency-Key": key})
    event_id = published.json()["event_id"]
    status = await client.get(f"/v1/events/{event_id}", headers=tenant.auth)
    assert status.status_code == 200
    body = status.json()
    assert body["event_id"] == event_id
    assert (body["status"], body["attempts"], body["event_type"]) == ("pending", 0, "order.created")
    assert body["received_at"] == published.json()["received_at"]
    assert "kafka" not in body

    by_key = await client.get("/v1/events", params={"idempotency_key": key}, headers=tenant.auth)
    assert by_key.json() == body
    by_quoted_key = await client.get("/v1/events", params={"idempotency_key": f'"{key}"'}, headers=tenant.auth)
    assert by_quoted_key.json() == body
    for missing in ("/v1/events/evt_nope", "/v1/events/evt_01M7YHMR0709BNNTSHMGF0ZP84", "/v1/events/" + "x" * 300):
        assert (await client.get(missing, headers=tenant.auth)).status_code == 404
    assert (
        await client.get("/v1/events", params={"idempotency_key": "unused"}, headers=tenant.auth)
    ).status_code == 404
    assert (await client.get("/v1/events", headers=tenant.auth)).status_code == 400


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def clocked(settings: Settings, clock: Clock) -> AsyncIterator[Client]:
    async with running(create_app(services=build_services(settings, clock=clock))) as test_client:
        yield test_client


async def test_key_can_be_reused_after_the_ttl(clocked: Client, clock: Clock, settings: Settings, sql: Any) -> None:
    tenant = await new_tenant(clocked)
    await clocked.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
    key = secrets.token_hex(8)

    def send(body: dict[str, Any]) -> Any:
        return clocked.post("/v1/events", json=body, headers={**tenant.auth, "Idempotency-Key": key})

    first = await send(order(1))
    clock.now += settings.idempotency_ttl - timedelta(seconds=1)
    assert (await send(order(1))).headers.get("Idempotent-Replayed") == "true"
    assert (await send(order(2))).status_code == 422
    clock.now += timedelta(seconds=2)
    # Expired: the key starts afresh, and even a different body is a new event.
    fresh = await send(order(2))
    assert fresh.status_code == 202
    assert "Idempotent-Replayed" not in fresh.headers
    assert fresh.json()["event_id"] != first.json()["event_id"]
    assert len(_outbox(sql, tenant.id, key)) == 2


async def test_events_land_in_a_partition_created_on_demand(clocked: Client, clock: Clock, sql: Any) -> None:
    # Far beyond the partitions `migrate` made: the API creates the day's partition itself.
    clock.now = datetime.now(UTC) + timedelta(days=40)
    tenant = await new_tenant(clocked)
    await clocked.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
    key = secrets.token_hex(8)
    response = await clocked.post("/v1/events", json=order(1), headers={**tenant.auth, "Idempotency-Key": key})
    assert response.status_code == 202, response.text
    assert len(_outbox(sql, tenant.id, key)) == 1
    status = await clocked.get(response.headers["Location"], headers=tenant.auth)
    assert status.status_code == 200


async def test_nul_characters_are_422_not_500(client: Client, tenant: TenantFixture) -> None:
    for body, pointer in [
        (order(1, partition_key="a\u0000b"), "/partition_key"),
        (order(1, headers={"h": "v\u0000"}), "/headers/h"),
    ]:
        response = await client.post("/v1/events", json=body, headers={**tenant.auth, **idem()})
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["pointer"].startswith(pointer.rsplit("/", 1)[0])
    schema = {"type": "object", "description": "nul \u0000 inside"}
    registered = await client.post("/v1/schemas/nul.test/versions", json={"schema": schema}, headers=tenant.auth)
    assert registered.status_code == 422, registered.text
    # The payload is stored as bytes: a NUL inside it is fine.
    await client.post("/v1/schemas/nul.ok/versions", json={"schema": {"type": "object"}}, headers=tenant.auth)
    ok = await client.post(
        "/v1/events", json={"event_type": "nul.ok", "payload": {"s": "a\u0000b"}}, headers={**tenant.auth, **idem()}
    )
    assert ok.status_code == 202


@pytest.mark.parametrize(
    ("body", "status", "pointer"),
    [
        (order(1, occurred_at="9999-12-31T23:59:59-23:59"), 422, "/occurred_at"),
        (order(1, occurred_at="0001-01-01T00:00:00+01:00"), 422, "/occurred_at"),
        ({"event_type": "order.created\n", "payload": {}}, 422, "/event_type"),
        (order(1, headers={"traceparent\n": "x"}), 422, "/headers"),
    ],
)
async def test_edge_inputs_are_4xx(
    client: Client, tenant: TenantFixture, body: dict[str, Any], status: int, pointer: str
) -> None:
    response = await client.post("/v1/events", json=body, headers={**tenant.auth, **idem()})
    assert response.status_code == status, response.text
    assert response.json()["errors"][0]["pointer"].startswith(pointer)


async def test_deeply_nested_json_is_400(client: Client, tenant: TenantFixture) -> None:
    deep = b'{"event_type": "order.created", "payload": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    response = await client.post(
        "/v1/events", content=deep, headers={**tenant.auth, **idem(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "nested" in response.json()["detail"]


async def test_cloudevent_time_out_of_range_is_422(client: Client, tenant: TenantFixture) -> None:
    event = {
        "specversion": "1.0",
        "type": "order.created",
        "data": {"order_id": "x", "amount": 1},
        "time": "9999-12-31T23:59:59-23:59",
    }
    headers = {**tenant.auth, **idem(), "Content-Type": "application/cloudevents+json"}
    response = await client.post("/v1/events", content=msgspec.json.encode(event), headers=headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["pointer"] == "/time"
