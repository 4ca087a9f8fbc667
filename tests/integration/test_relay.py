"""The relay against a real Kafka-wire broker (Tansu): record shape, routing, a second cluster, dead
letters, relays killed mid-flight and a broker restart. Each test has its own database."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import psycopg
import pytest

from events_api.http.app import build_services, create_app
from events_api.settings import Settings
from tests.conftest import ADMIN, ADMIN_TOKEN, TenantFixture, fresh_database, new_tenant
from tests.support.asgi import running
from tests.support.kafka import Broker, broker_fixture, consume_all, running_broker
from tests.support.relays import relay_running

kafka_broker = broker_fixture(scope="module")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture
def relay_db() -> Iterator[str]:
    """A database of its own, so the relay sees only this test's events."""
    with fresh_database("events_api_relay") as url:
        yield url


@dataclass
class Stack:
    api: httpx.AsyncClient
    tenant: TenantFixture
    db_url: str

    async def publish(self, event_type: str, n: int, key: str | None = "k", **extra: Any) -> str:
        body: dict[str, Any] = {"event_type": event_type, "payload": {"n": n}, **extra}
        if key is not None:
            body["partition_key"] = key
        response = await self.api.post(
            "/v1/events", json=body, headers={**self.tenant.auth, "Idempotency-Key": secrets.token_hex(8)}
        )
        assert response.status_code == 202, response.text
        event_id: str = response.json()["event_id"]
        return event_id

    async def status(self, event_id: str) -> dict[str, Any]:
        found: dict[str, Any] = (await self.api.get(f"/v1/events/{event_id}", headers=self.tenant.auth)).json()
        return found

    def pending(self) -> int:
        with psycopg.connect(self.db_url) as conn:
            row = conn.execute("SELECT count(*) FROM outbox WHERE state = 'pending'").fetchone()
            return int(row[0]) if row else 0

    async def drained(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert self.pending() == 0, f"{self.pending()} events still pending"


@asynccontextmanager
async def stack(db_url: str, event_types: tuple[str, ...] = ("order.created",)) -> AsyncIterator[Stack]:
    settings = Settings(database_url=db_url, admin_token=ADMIN_TOKEN)
    async with running(create_app(services=build_services(settings))) as api:
        tenant = await new_tenant(api)
        for event_type in event_types:
            registered = await api.post(
                f"/v1/schemas/{event_type}/versions", json={"schema": SCHEMA}, headers=tenant.auth
            )
            assert registered.status_code == 201
        yield Stack(api, tenant, db_url)


async def test_records_carry_the_contract_shape(relay_db: str, kafka_broker: Broker) -> None:
    async with stack(relay_db) as s, relay_running(relay_db, {"default": kafka_broker.bootstrap}):
        traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        response = await s.api.post(
            "/v1/events",
            json={
                "event_type": "order.created",
                "payload": {"n": 1},
                "partition_key": "order-1",
                "headers": {"source-app": "checkout"},
                "occurred_at": "2026-11-20T10:00:00Z",
            },
            headers={**s.tenant.auth, "Idempotency-Key": "shape-1", "traceparent": traceparent},
        )
        event_id = response.json()["event_id"]
        keyless = await s.publish("order.created", 2, key=None)
        await s.drained()
        status = await s.status(event_id)
        assert status["status"] == "published"
        assert status["kafka"]["topic"] == f"{s.tenant.id}.order.created"
        assert status["attempts"] == 1
        assert status["published_at"]

    records = consume_all(kafka_broker.bootstrap, f"{s.tenant.id}.order.created", expected=2, timeout=15)
    by_id = {r.headers["ce_id"].decode(): r for r in records}
    record = by_id[event_id]
    assert (record.partition, record.offset) == (status["kafka"]["partition"], status["kafka"]["offset"])
    assert record.key == b"order-1"
    assert msgspec.json.decode(record.value or b"") == {"n": 1}
    assert record.headers == {
        "ce_specversion": b"1.0",
        "ce_id": event_id.encode(),
        "ce_source": f"/tenants/{s.tenant.id}".encode(),
        "ce_type": b"order.created",
        "ce_time": b"2026-11-20T10:00:00.000Z",
        "content-type": b"application/json",
        "schema_version": b"1",
        "traceparent": traceparent.encode(),
        "source-app": b"checkout",
    }
    assert by_id[keyless].key == keyless.encode()


async def test_routing_and_a_second_cluster(relay_db: str, kafka_broker: Broker) -> None:
    with running_broker() as second:
        clusters = {"default": kafka_broker.bootstrap, "second": second.bootstrap}
        async with stack(relay_db, ("order.created", "order.shipped")) as s, relay_running(relay_db, clusters):
            routing = {"topic_template": "acme-{event_type}", "topics": {"order.shipped": "shipments"}}
            put = await s.api.put(f"/v1/tenants/{s.tenant.id}/routing", json=routing, headers=ADMIN)
            assert put.status_code == 200
            await asyncio.sleep(0.1)
            created = await s.publish("order.created", 1)
            shipped = await s.publish("order.shipped", 2)
            await s.drained()
            assert (await s.status(created))["kafka"]["topic"] == "acme-order.created"
            assert (await s.status(shipped))["kafka"]["topic"] == "shipments"

            moved = await s.api.put(
                f"/v1/tenants/{s.tenant.id}/routing", json={**routing, "cluster": "second"}, headers=ADMIN
            )
            assert moved.status_code == 200
            on_second = await s.publish("order.created", 3)
            await s.drained()
            assert (await s.status(on_second))["kafka"]["topic"] == "acme-order.created"
        assert len(consume_all(second.bootstrap, "acme-order.created", expected=1, timeout=15)) == 1
        first = consume_all(kafka_broker.bootstrap, "acme-order.created", expected=1, timeout=15)
        assert [r.headers["ce_id"].decode() for r in first] == [created]


async def test_an_oversized_event_is_dead_lettered_and_its_key_goes_on(relay_db: str, kafka_broker: Broker) -> None:
    async with (
        stack(relay_db) as s,
        relay_running(relay_db, {"default": kafka_broker.bootstrap}, **{"message.max.bytes": 4000}),
    ):
        before = await s.publish("order.created", 1)
        big = await s.api.post(
            "/v1/events",
            json={"event_type": "order.created", "payload": {"n": 2, "pad": "x" * 8000}, "partition_key": "k"},
            headers={**s.tenant.auth, "Idempotency-Key": secrets.token_hex(8)},
        )
        too_big = big.json()["event_id"]
        after = await s.publish("order.created", 3)
        await s.drained()
        dead = await s.status(too_big)
        assert dead["status"] == "dead_lettered"
        assert "MSG_SIZE_TOO_LARGE" in dead["last_error"]
        assert (await s.status(after))["status"] == "published"

    topic = f"{s.tenant.id}.order.created"
    delivered = [
        r.headers["ce_id"].decode() for r in consume_all(kafka_broker.bootstrap, topic, expected=2, timeout=15)
    ]
    assert delivered == [before, after]
    letters = consume_all(kafka_broker.bootstrap, f"{s.tenant.id}.dead-letter", expected=1, timeout=15)
    assert len(letters) == 1
    letter = letters[0]
    assert letter.headers["ce_id"].decode() == too_big
    assert letter.headers["error"].startswith(b"MSG_SIZE_TOO_LARGE")
    assert letter.headers["attempts"] == b"1"
    assert letter.headers["original_topic"] == topic.encode()
    assert "value_omitted" in letter.headers  # the value is what was too large
    with psycopg.connect(relay_db) as conn:
        assert conn.execute("SELECT count(*) FROM outbox WHERE event_id = %s", (too_big,)).fetchone() == (0,)


def _relay_process(db_url: str, bootstrap: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        "EVENTS_API_DATABASE_URL": db_url,
        "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EVENTS_API_RELAY_BATCH_SIZE": "200",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "events_api", "relay"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _relays_connected(db_url: str, count: int, timeout: float = 20.0) -> None:
    """Until `count` relays hold their database session (a relay started but not yet connected could not
    have installed its signal handlers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'events-api relay'"
                " AND datname = current_database()"
            ).fetchone()
        if row and row[0] >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{count} relays did not connect")


async def test_relays_killed_mid_flight_lose_nothing_and_keep_order(relay_db: str, kafka_broker: Broker) -> None:
    keys, per_key = 20, 100
    async with stack(relay_db) as s:
        steady = _relay_process(relay_db, kafka_broker.bootstrap)
        victim = _relay_process(relay_db, kafka_broker.bootstrap)
        kills = 0
        try:
            rng = random.Random(7)
            for round_ in range(per_key // 10):
                events = [
                    {"event_type": "order.created", "payload": {"n": round_ * 10 + i}, "partition_key": f"key-{k}"}
                    for i in range(10)
                    for k in range(keys)
                ]
                batch = await s.api.post(
                    "/v1/events/batch",
                    json={"events": events},
                    headers={**s.tenant.auth, "Idempotency-Key": secrets.token_hex(8)},
                )
                assert batch.status_code == 202
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                if round_ % 2 == 1:
                    victim.send_signal(signal.SIGKILL)
                    victim.wait(10)
                    kills += 1
                    victim = _relay_process(relay_db, kafka_broker.bootstrap)
            await s.drained(timeout=60)
            await _relays_connected(relay_db, 2)
        finally:
            for process in (steady, victim):
                process.send_signal(signal.SIGTERM)
            for process in (steady, victim):
                assert process.wait(30) == 0, "a relay did not stop cleanly on SIGTERM"

    total = keys * per_key
    records = consume_all(kafka_broker.bootstrap, f"{s.tenant.id}.order.created", expected=total, timeout=30, settle=1)
    firsts: dict[str, list[int]] = {}
    seen: set[str] = set()
    for record in records:  # sorted by (partition, offset): the order each key reached Kafka
        event_id = record.headers["ce_id"].decode()
        if event_id in seen:
            continue  # at least once: a redelivery after a kill
        seen.add(event_id)
        firsts.setdefault((record.key or b"").decode(), []).append(msgspec.json.decode(record.value or b"")["n"])
    assert len(seen) == total, f"lost {total - len(seen)} events"
    assert kills >= 4
    for key, numbers in firsts.items():
        assert numbers == sorted(numbers), f"{key} out of order"
        assert numbers == list(range(per_key)), key


async def test_events_wait_for_a_broker_restart(relay_db: str) -> None:
    with running_broker() as broker:
        broker.create_topic("placeholder", partitions=4)
        async with stack(relay_db) as s, relay_running(relay_db, {"default": broker.bootstrap}):
            first = await s.publish("order.created", 1)
            await s.drained()
            broker.stop()
            during = [await s.publish("order.created", n) for n in range(2, 12)]
            await asyncio.sleep(1.0)
            assert s.pending() == len(during)  # waiting, not lost and not dead-lettered
            broker.restart(recreate_topics=False)
            await s.drained(timeout=60)
            statuses = [await s.status(e) for e in [first, *during]]
            assert {st["status"] for st in statuses} == {"published"}
            assert max(st["attempts"] for st in statuses) >= 2
        records = consume_all(broker.bootstrap, f"{s.tenant.id}.order.created", expected=len(during), timeout=15)
        assert [r.headers["ce_id"].decode() for r in records] == during  # the broker forgot `first` on restart


async def test_dead_letters_are_listed_and_redriven_once_the_cause_is_fixed(
    relay_db: str, kafka_broker: Broker
) -> None:
    async with stack(relay_db) as s, relay_running(relay_db, {"default": kafka_broker.bootstrap}):
        routing = f"/v1/tenants/{s.tenant.id}/routing"
        assert (await s.api.put(routing, json={"cluster": "nowhere"}, headers=ADMIN)).status_code == 200
        lost = [await s.publish("order.created", n, key="k") for n in range(3)]
        await s.drained()
        assert {(await s.status(e))["status"] for e in lost} == {"dead_lettered"}

        page = await s.api.get("/v1/dead-letters", params={"limit": 2}, headers=s.tenant.auth)
        assert page.status_code == 200
        first = page.json()
        assert [d["event_id"] for d in first["dead_letters"]] == lost[:2]
        assert "UNKNOWN_CLUSTER" in first["dead_letters"][0]["last_error"]
        rest = await s.api.get(
            "/v1/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]}, headers=s.tenant.auth
        )
        assert [d["event_id"] for d in rest.json()["dead_letters"]] == lost[2:]
        assert rest.json()["next_cursor"] is None
        assert (
            await s.api.get("/v1/dead-letters", params={"cursor": "junk!"}, headers=s.tenant.auth)
        ).status_code == 400

        assert (await s.api.put(routing, json={}, headers=ADMIN)).status_code == 200  # the cause, fixed
        one = await s.api.post(f"/v1/dead-letters/{lost[0]}/redrive", headers=s.tenant.auth)
        assert (one.status_code, one.json()) == (202, {"event_id": lost[0], "status": "pending"})
        assert (await s.api.post(f"/v1/dead-letters/{lost[0]}/redrive", headers=s.tenant.auth)).status_code == 404
        await s.drained()
        assert (await s.status(lost[0]))["status"] == "published"
        rest_of_them = await s.api.post(
            "/v1/dead-letters/redrive", json={"event_type": "order.created"}, headers=s.tenant.auth
        )
        assert (rest_of_them.status_code, rest_of_them.json()) == (202, {"count": 2})
        await s.drained()
        assert {(await s.status(e))["status"] for e in lost} == {"published"}
        empty = await s.api.get("/v1/dead-letters", headers=s.tenant.auth)
        assert empty.json() == {"dead_letters": [], "next_cursor": None}
        audit = await s.api.get("/v1/audit", params={"action": "dead_letters.redriven"}, headers=s.tenant.auth)
        redrives = [(e["actor"], e["target"], e["details"]) for e in reversed(audit.json()["entries"])]
        assert redrives == [
            (s.tenant.key_id, lost[0], {"count": 1, "event_type": None}),
            (s.tenant.key_id, None, {"count": 2, "event_type": "order.created"}),
        ]

        other = await new_tenant(s.api)
        assert (await s.api.get("/v1/dead-letters", headers=other.auth)).json()["dead_letters"] == []
        assert (await s.api.post(f"/v1/dead-letters/{lost[0]}/redrive", headers=other.auth)).status_code == 404
    records = consume_all(kafka_broker.bootstrap, f"{s.tenant.id}.order.created", expected=3, timeout=15)
    assert sorted(r.headers["ce_id"].decode() for r in records) == sorted(lost)


async def test_relays_of_two_databases_do_not_share_lanes(relay_db: str, kafka_broker: Broker) -> None:
    """Advisory locks are per database: a relay must not skip lanes held by relays of another database."""
    with fresh_database("events_api_relay_other") as other_db:
        clusters = {"default": kafka_broker.bootstrap}
        async with relay_running(relay_db, dict(clusters)) as first, relay_running(other_db, dict(clusters)) as second:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (len(first.owned) < 256 or len(second.owned) < 256):
                await asyncio.sleep(0.1)
            assert (len(first.owned), len(second.owned)) == (256, 256)


async def test_a_chunked_redrive_body_is_read(relay_db: str) -> None:
    async with stack(relay_db) as s:

        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"event_type": '
            yield b'"order.created"}'

        response = await s.api.post(
            "/v1/dead-letters/redrive",
            content=chunks(),
            headers={**s.tenant.auth, "Content-Type": "application/json"},
        )
        assert (response.status_code, response.json()) == (202, {"count": 0})
        bad = await s.api.post(
            "/v1/dead-letters/redrive",
            content=b'{"event_type": 1}',
            headers={**s.tenant.auth, "Content-Type": "application/json"},
        )
        assert bad.status_code == 422
