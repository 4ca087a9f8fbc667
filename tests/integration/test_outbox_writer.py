"""Group commit, exercised directly against PostgreSQL."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from events_api.errors import ValidationFailed
from events_api.ids import new_event_id, truncate_to_millis
from events_api.settings import Settings
from events_api.storage.database import Database
from events_api.storage.events import Acceptance, Accepted, NewEvent
from events_api.storage.outbox_writer import OutboxWriter
from events_api.storage.platform import PlatformStore


@pytest.fixture
async def writer(database_url: str) -> AsyncIterator[OutboxWriter]:
    db = Database(Settings(database_url=database_url).sqlalchemy_url, pool_size=4)
    out = OutboxWriter(db)
    yield out
    await out.close()
    await db.dispose()


@pytest.fixture
async def key(writer: OutboxWriter) -> tuple[str, str]:
    """A tenant and a live API key id, created directly in storage."""
    platform = PlatformStore(writer.db)
    tenant = "w-" + secrets.token_hex(5)
    now = datetime.now(UTC)
    await platform.create_tenant(tenant, now, actor="test")
    key_id = "key_" + secrets.token_hex(8)
    await platform.create_api_key(
        tenant,
        key_id=key_id,
        name="t",
        scopes=["events:publish"],
        secret_hash=b"x",
        now=now,
        expires_at=None,
        actor="test",
    )
    return tenant, key_id


def _request(key: str, headers: dict[str, str] | None = None, events: int = 1) -> tuple[Acceptance, list[NewEvent]]:
    now = truncate_to_millis(datetime.now(UTC))
    new = [NewEvent(new_event_id(now), "t", 1, f"pk-{i}", i % 256, b'{"n": 1}', headers, None) for i in range(events)]
    acceptance = Acceptance(key, "event", b"f" * 32, 202, b"{}", now, now + timedelta(hours=1), None)
    return acceptance, new


def _stored(sql: psycopg.Connection[Any], tenant: str, key: str) -> int:
    row = sql.execute(
        "SELECT count(*) FROM outbox WHERE tenant_id = %s AND idempotency_key = %s", (tenant, key)
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_concurrent_requests_share_statements(writer: OutboxWriter, key: tuple[str, str], sql: Any) -> None:
    tenant, key_id = key
    keys = [secrets.token_hex(6) for _ in range(120)]
    results = await asyncio.gather(*(writer.accept(tenant, key_id, *_request(k, events=3)) for k in keys))
    assert results == [Accepted.STORED] * len(keys)
    assert all(_stored(sql, tenant, k) == 3 for k in keys)
    assert writer.requests_written == len(keys)
    assert writer.statements < len(keys) / 3, writer.statements


async def test_one_bad_request_does_not_fail_its_group(writer: OutboxWriter, key: tuple[str, str], sql: Any) -> None:
    tenant, key_id = key
    good = [secrets.token_hex(6) for _ in range(20)]
    bad = secrets.token_hex(6)
    # A NUL in a header value cannot be stored in jsonb (the API refuses it earlier; here it is forced).
    calls = [writer.accept(tenant, key_id, *_request(k)) for k in good[:10]]
    calls.append(writer.accept(tenant, key_id, *_request(bad, headers={"h": "a\u0000b"})))
    calls += [writer.accept(tenant, key_id, *_request(k)) for k in good[10:]]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[10], ValidationFailed)
    assert [r for i, r in enumerate(results) if i != 10] == [Accepted.STORED] * 20
    assert all(_stored(sql, tenant, k) == 1 for k in good)
    assert _stored(sql, tenant, bad) == 0


async def test_one_key_twice_is_never_in_one_group(writer: OutboxWriter, key: tuple[str, str], sql: Any) -> None:
    tenant, key_id = key
    shared = secrets.token_hex(6)
    others = [writer.accept(tenant, key_id, *_request(secrets.token_hex(6))) for _ in range(10)]
    results = await asyncio.gather(
        writer.accept(tenant, key_id, *_request(shared)), *others, writer.accept(tenant, key_id, *_request(shared))
    )
    assert sorted([results[0], results[-1]], key=lambda a: a.value) == [Accepted.KEY_TAKEN, Accepted.STORED]
    assert _stored(sql, tenant, shared) == 1


async def test_revoked_key_stores_nothing(writer: OutboxWriter, key: tuple[str, str], sql: Any) -> None:
    tenant, key_id = key
    await PlatformStore(writer.db).revoke_api_key(tenant, key_id, datetime.now(UTC), actor="test")
    idempotency_key = secrets.token_hex(6)
    assert await writer.accept(tenant, key_id, *_request(idempotency_key)) is Accepted.CALLER_NOT_LIVE
    assert await writer.accept(tenant, "key_other", *_request(idempotency_key)) is Accepted.CALLER_NOT_LIVE
    assert _stored(sql, tenant, idempotency_key) == 0


async def test_writers_claiming_keys_in_opposite_orders_do_not_deadlock(
    writer: OutboxWriter, key: tuple[str, str], database_url: str, sql: Any
) -> None:
    tenant, key_id = key
    other_db = Database(Settings(database_url=database_url).sqlalchemy_url, pool_size=4)
    other = OutboxWriter(other_db)
    try:
        for _ in range(5):
            shared = [secrets.token_hex(6) for _ in range(12)]
            mine = [writer.accept(tenant, key_id, *_request(k)) for k in shared]
            theirs = [other.accept(tenant, key_id, *_request(k)) for k in reversed(shared)]
            results = await asyncio.gather(*mine, *theirs, return_exceptions=True)
            assert all(isinstance(r, Accepted) for r in results), results
            assert all(_stored(sql, tenant, k) == 1 for k in shared)
    finally:
        await other.close()
        await other_db.dispose()


async def test_a_revocation_waits_for_a_publish_in_flight(
    writer: OutboxWriter, key: tuple[str, str], sql: Any, database_url: str
) -> None:
    """No event is accepted after its key's revocation committed: a revocation that arrives while a
    publish waits is held until that publish commits."""
    tenant, key_id = key
    idempotency_key = secrets.token_hex(6)
    with psycopg.connect(database_url) as blocker:
        # Hold the (tenant, key) row so the publish statement waits after it has checked the key.
        blocker.execute(
            "INSERT INTO idempotency_keys (tenant_id, key, operation, fingerprint, event_ids, response_status,"
            " response_body, created_at, expires_at) VALUES (%s, %s, 'event', '\\x00', '{}', 202, '\\x00',"
            " now() - interval '2 days', now() - interval '1 day')",
            (tenant, idempotency_key),
        )
        publish = asyncio.create_task(writer.accept(tenant, key_id, *_request(idempotency_key)))
        await asyncio.sleep(0.3)
        revoke = asyncio.create_task(
            PlatformStore(writer.db).revoke_api_key(tenant, key_id, datetime.now(UTC), actor="test")
        )
        await asyncio.sleep(0.3)
        assert not revoke.done(), "the revocation committed while a publish with that key was in flight"
        blocker.rollback()
    assert await publish is Accepted.STORED
    assert await revoke is True
    assert _stored(sql, tenant, idempotency_key) == 1
    after = secrets.token_hex(6)
    assert await writer.accept(tenant, key_id, *_request(after)) is Accepted.CALLER_NOT_LIVE
