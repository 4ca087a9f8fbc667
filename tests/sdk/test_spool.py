"""The local spool: publishes the API cannot take wait in a SQLite file, survive a restart of the client,
and are delivered once, under the key they were first sent with, when the API is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from events_api_client import FlushReport, ValidationError

from tests.conftest import free_port
from tests.sdk.conftest import Opener, Tenant, eventually, order, stored_events
from tests.sdk.flaky_front import Act, FlakyFront


@pytest.fixture
def front(server: str) -> FlakyFront:
    """A front on a fixed port that is not started yet: the API is unreachable until `front.start()`."""
    return FlakyFront(server, port=free_port())


async def test_an_unreachable_api_spools_and_a_restarted_client_delivers_once(
    front: FlakyFront, api_tenant: Tenant, open_client: Opener, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    spool = tmp_path / "events-spool.db"
    async with open_client(front.url, api_tenant.key, spool_path=spool, flush_interval=None) as client:
        result = await client.publish("order.created", order(1), partition_key="c-1")
        assert (result.status, result.spooled, result.event_id, result.received_at) == ("spooled", True, None, None)
        assert client.spool_size == 1
        again = await client.publish("order.created", order(1), idempotency_key=result.idempotency_key)
        assert again.spooled
        assert client.spool_size == 1  # one key, one event

    front.start()  # the API is back; a new process opens the same spool file
    try:
        async with open_client(front.url, api_tenant.key, spool_path=spool, flush_interval=None) as client:
            assert client.spool_size == 1
            assert await client.flush() == FlushReport(delivered=1, rejected=0, remaining=0)
            assert client.spool_size == 0
            assert await client.flush() == FlushReport(0, 0, 0)
            found = await client.find_event(result.idempotency_key)
            assert found is not None
            assert found.event_type == "order.created"
    finally:
        front.stop()
    assert stored_events(sql, api_tenant.id) == 1
    assert {s.idempotency_key for s in front.seen if s.method == "POST"} == {result.idempotency_key}


async def test_an_event_whose_answer_was_lost_is_spooled_under_its_key_and_never_doubled(
    front: FlakyFront, api_tenant: Tenant, open_client: Opener, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    front.default = Act.FORWARD_THEN_DROP  # every attempt reaches the server; no answer comes back
    front.start()
    try:
        async with open_client(front.url, api_tenant.key, spool_path=tmp_path / "s.db", flush_interval=None) as client:
            result = await client.publish("order.created", order(1))
            assert result.spooled
            assert stored_events(sql, api_tenant.id) == 1  # it did land, though the client could not know

            front.default = Act.FORWARD
            assert await client.flush() == FlushReport(1, 0, 0)
    finally:
        front.stop()
    assert stored_events(sql, api_tenant.id) == 1
    posts = [s for s in front.seen if s.method == "POST"]
    assert len(posts) > 2
    assert {s.idempotency_key for s in posts} == {result.idempotency_key}


async def test_the_background_flusher_delivers_in_order_once_the_api_is_back(
    front: FlakyFront, api_tenant: Tenant, open_client: Opener, tmp_path: Path, sql: psycopg.Connection[Any]
) -> None:
    async with open_client(front.url, api_tenant.key, spool_path=tmp_path / "s.db", flush_interval=0.05) as client:
        first = await client.publish("order.created", order(1), partition_key="c-1")
        second = await client.publish("order.created", order(2), partition_key="c-1")
        assert first.spooled
        assert second.spooled  # queued behind the first at once, without trying the API again
        assert client.spool_size == 2

        front.start()
        try:

            async def delivered() -> bool:
                return bool(client.spool_size == 0)

            await eventually(delivered)
            found = [await client.find_event(r.idempotency_key) for r in (first, second)]
        finally:
            front.stop()
    assert None not in found
    accepted = sql.execute("SELECT idempotency_key FROM outbox WHERE tenant_id = %s ORDER BY seq", (api_tenant.id,))
    assert [key for (key,) in accepted] == [first.idempotency_key, second.idempotency_key]  # the order was kept


async def test_refusals_are_raised_or_kept_aside_never_retried_forever(
    front: FlakyFront, api_tenant: Tenant, open_client: Opener, tmp_path: Path
) -> None:
    async with open_client(front.url, api_tenant.key, spool_path=tmp_path / "s.db", flush_interval=None) as client:
        refused = await client.publish("order.refunded", {"order_id": "o-1"})  # no such type: the API will say 422
        good = await client.publish("order.created", order(1))
        assert client.spool_size == 2

        front.start()
        try:
            assert await client.flush() == FlushReport(delivered=1, rejected=1, remaining=0)
            assert client.spool_size == 0
            assert client.spool is not None
            [kept] = client.spool.rejected()
            assert kept.idempotency_key == refused.idempotency_key
            assert kept.last_error is not None
            assert kept.last_error.startswith("422")
            assert await client.find_event(good.idempotency_key) is not None

            with pytest.raises(ValidationError):  # a refusal while the API is up is the caller's to handle
                await client.publish("order.created", order(1, amount="x"))
            assert client.spool_size == 0
        finally:
            front.stop()
