"""Faults, each with its recovery and without a restart: the database goes away mid-test (clients get 503 +
Retry-After, never a 202 without its row; /metrics says not ready), Redis is cut under a real server (ingest goes
on, limits come back), Kafka is down (events wait, /metrics shows the backlog ageing, all arrive after) and a
relay is killed (its lanes move to the survivor within seconds, as /metrics shows)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from events_api.http.app import build_services, create_app
from events_api.metrics import PlatformMetrics
from events_api.settings import Settings
from tests.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    ALL_SCOPES,
    ORDER_SCHEMA,
    TenantFixture,
    fresh_database,
    idem,
    new_tenant,
    order,
    serving,
)
from tests.support.asgi import running
from tests.support.kafka import consume_all, running_broker
from tests.support.proxy import TcpProxy
from tests.support.relays import relay_running

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


# --- the platform's view on /metrics while things fail ----------------------------------------------------


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _lanes(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> dict[str, float]:
    return {dict(labels)["relay"]: v for (name, labels), v in samples.items() if name == "relay_lanes_owned"}


async def _metrics(api: Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = await api.get("/metrics")
    assert response.status_code == 200
    return _samples(response.text)


def _uncached(settings: Settings) -> Any:
    """The app, reading the database's side of /metrics at every scrape (no 2 s cache to wait out)."""
    services = build_services(settings)
    return create_app(
        services=dataclasses.replace(services, platform_metrics=PlatformMetrics(services.db, cache_seconds=0))
    )


async def test_metrics_answer_while_the_database_is_down(
    settings: Settings, proxy: TcpProxy, database_url: str
) -> None:
    parts = urlsplit(database_url)
    through_proxy = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"))
    async with running(_uncached(Settings(database_url=through_proxy, admin_token=settings.admin_token))) as api:
        up = await _metrics(api)
        assert _value(up, "events_api_ready") == 1
        assert _value(up, "outbox_unpublished_events") is not None
        await proxy.stop()
        down = await _metrics(api)  # still answers, at once: the scrape itself must not fail
        assert _value(down, "events_api_ready") == 0
        assert _value(down, "outbox_unpublished_events") is None  # unknown, not a stale number
        assert _value(down, "http_request_duration_seconds_count", route="/metrics", method="GET", status="200")
        await proxy.start()
        assert _value(await _metrics(api), "events_api_ready") == 1


class ThreadedProxy:
    """A TcpProxy on its own event loop in a thread, for a server subprocess to talk through while the test
    itself blocks (the `serving` helper waits synchronously)."""

    def __init__(self, host: str, port: int) -> None:
        self.proxy = TcpProxy(host, port)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _run(self, coroutine: Any) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def start(self) -> None:
        self._run(self.proxy.start())

    def stop(self) -> None:
        self._run(self.proxy.stop())

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_a_real_server_keeps_ingesting_while_redis_is_cut(database_url: str, redis_url: str) -> None:
    host, port = redis_url.removeprefix("redis://").split("/")[0].split(":")
    redis = ThreadedProxy(host, int(port))
    redis.start()
    try:
        redis_through_proxy = f"redis://127.0.0.1:{redis.proxy.port}/0"
        with (
            serving(database_url, redis_url=redis_through_proxy, max_batch_events="5") as base,
            httpx.Client(base_url=base, timeout=10) as http,
        ):
            tenant = "r-" + secrets.token_hex(4)
            assert http.post("/v1/tenants", json={"id": tenant}, headers=ADMIN).status_code == 201
            keys = http.post(f"/v1/tenants/{tenant}/api-keys", json={"scopes": ALL_SCOPES}, headers=ADMIN)
            auth = {"Authorization": f"Bearer {keys.json()['key']}"}
            schema = {"schema": ORDER_SCHEMA}
            assert http.post("/v1/schemas/order.created/versions", json=schema, headers=auth).status_code == 201
            limits = http.put(f"/v1/tenants/{tenant}/rate-limits", json={"events_per_second": 1}, headers=ADMIN)
            assert limits.status_code == 200

            def burst(n: int) -> list[int]:
                return [
                    httpx.post(f"{base}/v1/events", json=order(i), headers={**auth, **idem()}).status_code
                    for i in range(n)
                ]

            assert 429 in burst(12)  # a bucket of 5 events at 1/s, shared by both workers through Redis
            redis.stop()
            assert burst(20) == [202] * 20  # fail open: every request is stored, none waits on Redis
            samples = _samples(http.get("/metrics").text)
            assert (_value(samples, "rate_limit_fail_open_total") or 0) >= 1
            redis.start()
            time.sleep(1.2)  # each worker leaves Redis alone for a second after a failure
            assert 429 in burst(12)  # the limits hold again, without a restart
            samples = _samples(http.get("/metrics").text)
            assert (_value(samples, "rate_limited_requests_total") or 0) >= 2
    finally:
        redis.close()


@pytest.fixture
def own_db() -> Iterator[str]:
    """A database of its own: its backlog and relays are this test's alone."""
    with fresh_database("events_api_faults") as url:
        yield url


async def _until(check: Any, timeout: float, what: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found is not None:
            return found  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.2)


async def test_kafka_down_events_wait_the_age_grows_and_all_arrive_after(own_db: str) -> None:
    settings = Settings(database_url=own_db, admin_token=ADMIN_TOKEN)
    with running_broker() as broker:
        broker.create_topic("placeholder", partitions=4)  # a restart re-creates it: see tests/support/kafka.py
        async with running(_uncached(settings)) as api, relay_running(own_db, broker.bootstrap):
            tenant = await _ready_tenant(api)

            async def publish(n: int) -> str:
                body = order(n, partition_key="one-key")
                response = await api.post("/v1/events", json=body, headers={**tenant.auth, **idem()})
                assert response.status_code == 202
                event_id: str = response.json()["event_id"]
                return event_id

            async def settled(published: int) -> Any:
                samples = await _metrics(api)
                done = _value(samples, "relay_published_total") == published
                return samples if done and _value(samples, "outbox_unpublished_events") == 0 else None

            await publish(0)
            await _until(lambda: settled(1), 20, "the first event published")

            broker.stop()
            during = [await publish(n) for n in range(1, 6)]
            first = await _metrics(api)
            assert _value(first, "outbox_unpublished_events") == 5
            await asyncio.sleep(1.5)

            async def retrying() -> Any:
                samples = await _metrics(api)
                return samples if (_value(samples, "relay_retries_total") or 0) > 0 else None

            later = await _until(retrying, 20, "the relay retrying the events Kafka did not take")
            assert _value(later, "outbox_unpublished_events") == 5  # waiting: not lost, not dead-lettered
            assert _value(later, "relay_dead_lettered_total") == 0
            age, earlier_age = (
                _value(later, "outbox_oldest_unpublished_age_seconds"),
                _value(first, "outbox_oldest_unpublished_age_seconds"),
            )
            assert age is not None
            assert earlier_age is not None
            assert age >= earlier_age + 1.5
            assert _value(later, "relay_instances") == 1  # the relay keeps its lanes through a Kafka outage

            broker.restart(recreate_topics=False)
            after = await _until(lambda: settled(6), 60, "every event published once Kafka is back")
            assert _value(after, "outbox_oldest_unpublished_age_seconds") == 0
        records = consume_all(broker.bootstrap, f"{tenant.id}.order.created", expected=5, timeout=15)
        # In order: the broker forgot the first event with its restart (memory storage); at least once, so a
        # record could come twice, but never out of order.
        delivered = [r.headers["ce_id"].decode() for r in records]
        assert list(dict.fromkeys(delivered)) == during


def _relay_process(db_url: str, bootstrap: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        "EVENTS_API_DATABASE_URL": db_url,
        "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "events_api", "relay"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def test_a_killed_relays_lanes_move_within_seconds(own_db: str) -> None:
    settings = Settings(database_url=own_db, admin_token=ADMIN_TOKEN)
    with running_broker() as broker:
        relays = [_relay_process(own_db, broker.bootstrap) for _ in range(2)]
        try:
            async with running(_uncached(settings)) as api:

                async def shared() -> Any:
                    samples = await _metrics(api)
                    lanes = _lanes(samples)
                    balanced = len(lanes) == 2 and min(lanes.values()) >= 64
                    return samples if balanced and _value(samples, "relay_lanes_unowned") == 0 else None

                before = await _until(shared, 30, "two relays sharing the 256 lanes")
                assert _value(before, "relay_instances") == 2
                assert sum(_lanes(before).values()) == 256

                relays[0].send_signal(signal.SIGKILL)
                relays[0].wait(10)
                killed_at = time.monotonic()

                async def moved() -> Any:
                    samples = await _metrics(api)
                    lanes = _lanes(samples)
                    taken = len(lanes) == 1 and set(lanes.values()) == {256}
                    return samples if taken and _value(samples, "relay_lanes_unowned") == 0 else None

                after = await _until(moved, 10, "the survivor taking every lane")
                took = time.monotonic() - killed_at
                assert _value(after, "relay_instances") == 1
                assert took < 5, f"the lanes took {took:.1f} s to move"

                tenant = await _ready_tenant(api)  # and the survivor delivers
                assert (
                    await api.post("/v1/events", json=order(1), headers={**tenant.auth, **idem()})
                ).status_code == 202

                async def published() -> Any:
                    samples = await _metrics(api)
                    return samples if _value(samples, "relay_published_total") == 1 else None

                await _until(published, 20, "the event published by the surviving relay")
        finally:
            for process in relays:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in relays:
                process.wait(30)
