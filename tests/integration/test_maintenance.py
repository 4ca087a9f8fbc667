"""Partition lifecycle, idempotency-key expiry and the leader-elected maintenance loop, against the real
PostgreSQL. Maintenance is platform-wide, so every test has a database of its own. Time is passed in
(`now`); events are accepted through the real API with its clock set in the past, and settled through
the relay's real storage (no Kafka needed to say "published" or "dead-lettered")."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from events_api.http.app import build_services, create_app
from events_api.lanes import LANES
from events_api.maintenance import (
    MaintenanceLoop,
    MaintenancePolicy,
    MaintenanceReport,
    PartitionOutcome,
    expired_partitions,
    is_expired,
    maintain,
)
from events_api.settings import Settings
from events_api.storage.maintenance import MaintenanceStore
from events_api.storage.partitions import partition_name
from events_api.storage.relay import RelayStore, Settlement
from relay.relay import Relay
from tests.conftest import ADMIN_TOKEN, TenantFixture, fresh_database, new_tenant
from tests.support.asgi import running

NOW = datetime.now(UTC)
RETENTION = timedelta(days=7)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
# The API creates today and 7 days ahead at start; maintenance here looks 9 ahead, so it has 2 to create.
POLICY = MaintenancePolicy(retention=RETENTION, partitions_ahead_days=9)


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def db() -> Iterator[str]:
    with fresh_database("events_api_maint") as url:
        yield url


def conninfo(url: str) -> str:
    return Settings(database_url=url).psycopg_conninfo


@dataclass
class Api:
    http: httpx.AsyncClient
    tenant: TenantFixture
    clock: Clock

    async def publish(self, n: int, *, at: datetime, key: str | None = None) -> str:
        self.clock.now = at
        response = await self.http.post(
            "/v1/events",
            json={"event_type": "order.created", "payload": {"n": n}, "partition_key": f"k{n}"},
            headers={**self.tenant.auth, "Idempotency-Key": key or secrets.token_hex(8)},
        )
        assert response.status_code == 202, response.text
        event_id: str = response.json()["event_id"]
        return event_id


@asynccontextmanager
async def api(url: str) -> AsyncIterator[Api]:
    clock = Clock(NOW)
    services = build_services(Settings(database_url=url, admin_token=ADMIN_TOKEN), clock=clock)
    async with running(create_app(services=services)) as http:
        tenant = await new_tenant(http)
        registered = await http.post("/v1/schemas/order.created/versions", json={"schema": SCHEMA}, headers=tenant.auth)
        assert registered.status_code == 201, registered.text
        yield Api(http, tenant, clock)


async def settle(url: str, *, dead: Collection[str] = (), leave: Collection[str] = ()) -> None:
    """Settle every pending event as a relay would: published, dead-lettered (`dead`), or left pending."""
    store = RelayStore(conninfo(url))
    await store.connect()
    try:
        lanes = await store.take_lanes(range(LANES), LANES)
        batch = await store.claim(sorted(lanes), NOW, limit=10_000, per_lane=256)
        settlements = [
            Settlement(e, "dead", topic="t", error="boom")
            if e.event_id in dead
            else Settlement(e, "published", "t", 0, i)
            for i, e in enumerate(batch)
            if e.event_id not in leave
        ]
        await store.settle(settlements, NOW)
    finally:
        await store.close()


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid").fetchall()
        return {r[0] for r in rows}


def scalar(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


async def run_maintenance(
    url: str, now: datetime = NOW, policy: MaintenancePolicy = POLICY, **kw: Any
) -> MaintenanceReport:
    store = MaintenanceStore(conninfo(url))
    await store.connect()
    try:
        return await maintain(store, policy, now, **kw)
    finally:
        await store.close()


def waiting_for_a_lock(url: str) -> bool:
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
    return bool(scalar(url, query, "events-api maintenance"))


def by_name(report: MaintenanceReport) -> dict[str, PartitionOutcome]:
    return {p.name: p for p in report.partitions}


def day(delta_days: int) -> date:
    return (NOW + timedelta(days=delta_days)).date()


# --- decisions ------------------------------------------------------------------------------------


def test_a_partition_expires_when_its_newest_possible_event_is_past_retention() -> None:
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    assert is_expired(date(2026, 11, 12), now, RETENTION)  # ends 11-13 00:00, retention reaches back to 11-13 12:00
    assert not is_expired(date(2026, 11, 13), now, RETENTION)  # ends 11-14 00:00: may hold events younger than 7d
    assert is_expired(date(2026, 11, 13), now.replace(day=21, hour=0), RETENTION)  # exactly at the bound
    names = ["outbox_p20261113", "outbox_p20261101", "outbox_p20261120", "outbox_legacy", "outbox_p20261399"]
    assert expired_partitions(names, now, RETENTION) == [("outbox_p20261101", date(2026, 11, 1))]


# --- partitions -----------------------------------------------------------------------------------


async def test_a_pending_event_keeps_its_partition_while_a_delivered_one_is_dropped(db: str) -> None:
    async with api(db) as a:
        delivered = [await a.publish(1, at=NOW - timedelta(days=10)), await a.publish(2, at=NOW - timedelta(days=10))]
        doomed = await a.publish(3, at=NOW - timedelta(days=10))
        waiting = await a.publish(4, at=NOW - timedelta(days=9))
        published_next_day = await a.publish(5, at=NOW - timedelta(days=9))
        recent = await a.publish(6, at=NOW - timedelta(days=2))
        await settle(db, dead={doomed}, leave={waiting})

        report = await run_maintenance(db)
        outcomes = by_name(report)
        old, newer, young = partition_name(day(-10)), partition_name(day(-9)), partition_name(day(-2))
        assert outcomes[old].action == "dropped"
        assert outcomes[newer].action == "kept"
        assert outcomes[newer].reason == "1 pending event(s)"
        assert young not in outcomes  # within retention: not even looked at
        assert outcomes[partition_name(day(9))].action == "created"
        assert {partition_name(day(d)) for d in range(10)} <= tables(db)
        assert old not in tables(db)
        assert {newer, young} <= tables(db)
        # The partition is gone with its published events; the dead letter lives on in its own table.
        assert scalar(db, "SELECT count(*) FROM outbox WHERE event_id = ANY(%s)", [*delivered, doomed]) == 0
        assert scalar(db, "SELECT count(*) FROM dead_letters WHERE event_id = %s", doomed) == 1
        assert scalar(db, "SELECT state FROM outbox WHERE event_id = %s", waiting) == "pending"
        assert scalar(db, "SELECT state FROM outbox WHERE event_id = %s", published_next_day) == "published"
        assert scalar(db, "SELECT state FROM outbox WHERE event_id = %s", recent) == "published"

        # Redriving the dead letter brings its day's partition back; it is kept until delivered, then dropped.
        redriven = await a.http.post(f"/v1/dead-letters/{doomed}/redrive", headers=a.tenant.auth)
        assert redriven.status_code == 202, redriven.text
        assert old in tables(db)
        again = by_name(await run_maintenance(db))
        assert (again[old].action, again[old].reason) == ("kept", "1 pending event(s)")
        assert partition_name(day(9)) not in again  # already there
        await settle(db)
        last = by_name(await run_maintenance(db))
        assert (last[old].action, last[newer].action) == ("dropped", "dropped")
        assert not {old, newer} & tables(db)


async def test_an_insert_racing_with_the_drop_keeps_the_partition(db: str) -> None:
    async with api(db) as a:
        first = await a.publish(1, at=NOW - timedelta(days=12))
        await settle(db)
    old = partition_name(day(-12))
    # A writer (as a redrive does) routes a pending event into the expired partition and has not committed yet:
    # the check outside the lock cannot see it; the one under the lock waits for it and must.
    with psycopg.connect(db) as writer:
        writer.execute(
            "INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, lane, idempotency_key,"
            " payload, next_attempt_at) SELECT received_at, event_id || 'x', tenant_id, event_type, schema_version,"
            " lane, idempotency_key, payload, next_attempt_at FROM outbox WHERE event_id = %s",
            (first,),
        )
        policy = MaintenancePolicy(retention=RETENTION, partitions_ahead_days=3, lock_timeout=timedelta(seconds=10))
        running_maintenance = asyncio.create_task(run_maintenance(db, policy=policy))
        deadline = time.monotonic() + 10
        while not waiting_for_a_lock(db) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert waiting_for_a_lock(db)  # past the look outside the lock, queued behind the writer
        writer.commit()
        report = await asyncio.wait_for(running_maintenance, 15)
    outcome = by_name(report)[old]
    assert (outcome.action, outcome.reason) == ("kept", "1 pending event(s) arrived during the check")
    assert old in tables(db)
    assert scalar(db, "SELECT count(*) FROM outbox WHERE event_id = %s", first + "x") == 1


async def test_a_busy_outbox_defers_the_drop_instead_of_blocking_ingest(db: str) -> None:
    async with api(db) as a:
        await a.publish(1, at=NOW - timedelta(days=12))
        await settle(db)
    old = partition_name(day(-12))
    with psycopg.connect(db) as reader:
        reader.execute("SELECT count(*) FROM outbox")  # a long transaction holding a share lock on the outbox
        started = time.monotonic()
        policy = MaintenancePolicy(
            retention=RETENTION, partitions_ahead_days=3, lock_timeout=timedelta(milliseconds=200)
        )
        report = await run_maintenance(db, policy=policy)
        waited = time.monotonic() - started
        reader.rollback()
    assert by_name(report)[old].action == "deferred"
    assert waited < 3
    assert old in tables(db)
    assert by_name(await run_maintenance(db))[old].action == "dropped"  # the next run, once the outbox is free


# --- idempotency keys -----------------------------------------------------------------------------


async def test_only_expired_idempotency_keys_are_pruned_in_batches(db: str) -> None:
    async with api(db) as a:
        for n in range(7):  # received 2 days ago: their 24 h replay window is over
            await a.publish(n, at=NOW - timedelta(days=2), key=f"old-{n}")
        for n in range(3):
            await a.publish(10 + n, at=NOW - timedelta(hours=1), key=f"live-{n}")

        ticks = itertools.count()
        policy = MaintenancePolicy(retention=RETENTION, partitions_ahead_days=3, key_batch=3, key_time_budget=2.5)
        steps: list[tuple[str, int]] = []
        report = await run_maintenance(
            db, policy=policy, monotonic=lambda: float(next(ticks)), progress=lambda s, n: steps.append((s, n))
        )
        # The budget (2.5 ticks) ends the run after two full batches; the next run finishes.
        assert (report.keys_pruned, report.key_batches, report.keys_done) == (6, 2, False)
        assert steps == [("keys", 3), ("keys", 3)]
        report = await run_maintenance(db, policy=MaintenancePolicy(RETENTION, 3, key_batch=3))
        assert (report.keys_pruned, report.key_batches, report.keys_done) == (1, 1, True)
        keys = scalar(db, "SELECT array_agg(key ORDER BY key) FROM idempotency_keys")
        assert keys == ["live-0", "live-1", "live-2"]

        # A live key still replays; an expired one was free to be used again anyway.
        a.clock.now = NOW
        replay = await a.http.post(
            "/v1/events",
            json={"event_type": "order.created", "payload": {"n": 10}, "partition_key": "k10"},
            headers={**a.tenant.auth, "Idempotency-Key": "live-0"},
        )
        assert replay.headers.get("idempotent-replayed") == "true"


# --- leader election ------------------------------------------------------------------------------


async def test_one_maintainer_leads_and_another_takes_over_when_it_dies(db: str) -> None:
    first, second = MaintenanceLoop(conninfo(db), POLICY), MaintenanceLoop(conninfo(db), POLICY)
    try:
        reports = await asyncio.gather(first.tick(), second.tick())
        assert sum(r is not None for r in reports) == 1
        leader, follower = (first, second) if reports[0] is not None else (second, first)
        assert await follower.tick() is None
        assert await leader.tick() is not None
        await leader.store.close()  # the leader's session ends (a crash does the same)
        # The server ends the session (and frees its locks) a moment after the client hung up.
        deadline = time.monotonic() + 5
        while (report := await follower.tick()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert report is not None
        assert follower.leading
    finally:
        await first.store.close()
        await second.store.close()


async def test_concurrent_loops_work_only_in_the_leader(db: str) -> None:
    loops = [MaintenanceLoop(conninfo(db), POLICY, interval=0.05) for _ in range(3)]
    stops = [asyncio.Event() for _ in loops]
    tasks = [asyncio.create_task(loop.run(stop)) for loop, stop in zip(loops, stops, strict=True)]
    try:
        deadline = time.monotonic() + 10
        while max(loop.runs for loop in loops) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        working = [loop for loop in loops if loop.runs]
        assert len(working) == 1
        assert working[0].runs >= 3
        index = loops.index(working[0])
        stops[index].set()  # the leader's relay stops: its session and lock go
        await asyncio.wait_for(tasks[index], 10)
        others = [loop for loop in loops if loop is not working[0]]
        deadline = time.monotonic() + 5
        while not any(loop.runs for loop in others) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert sum(bool(loop.runs) for loop in others) == 1
    finally:
        for stop in stops:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


async def test_the_relay_runs_the_maintenance_loop(db: str) -> None:
    async with api(db) as a:
        await a.publish(1, at=NOW - timedelta(days=11))
        await settle(db)
    # No event is pending, so the relay never needs Kafka here.
    settings = Settings(database_url=db, kafka_bootstrap_servers="127.0.0.1:9", partitions_ahead_days=6)
    relay, stop = Relay(settings), asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        deadline = time.monotonic() + 10
        while relay.maintenance.last_report is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
    assert relay.maintenance.last_report is not None
    assert partition_name(day(6)) in tables(db)
    assert partition_name(day(-11)) not in tables(db)


# --- the command ----------------------------------------------------------------------------------


async def test_events_api_maintain_prints_what_it_did(db: str) -> None:
    async with api(db) as a:
        await a.publish(1, at=NOW - timedelta(days=10))
        await a.publish(2, at=NOW - timedelta(days=9))
        pending = await a.publish(3, at=NOW - timedelta(days=9))
        await settle(db, leave={pending})
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        "EVENTS_API_DATABASE_URL": db,
        "EVENTS_API_PARTITIONS_AHEAD_DAYS": "9",
        "EVENTS_API_IDEMPOTENCY_TTL": "1h",
    }
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "events_api", "maintain"], env=env, capture_output=True, timeout=60
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 3}
    assert "dropped" in lines[partition_name(day(-10))]
    assert "kept" in lines[partition_name(day(-9))]
    assert "1 pending event(s)" in lines[partition_name(day(-9))]
    assert "created" in lines[partition_name(day(9))]
    assert "partitions: 2 created, 1 dropped, 1 kept, 0 deferred" in out
    assert "idempotency keys: 3 expired pruned in 1 batch(es)" in out

    again = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "events_api", "maintain", "--json"], env=env, capture_output=True
    )
    assert again.returncode == 0, again.stderr.decode()
    report = json.loads(again.stdout)
    assert [(p["name"], p["action"]) for p in report["partitions"]] == [(partition_name(day(-9)), "kept")]
    assert report["keys_pruned"] == 0
