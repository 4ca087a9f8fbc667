"""The happy paths and the typed errors, against the real server, with both clients."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import pytest
from events_api_client import (
    AuthenticationError,
    ConflictError,
    Event,
    NextStep,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)

from tests.sdk.conftest import Opener, Tenant, create_tenant, order
from tests.sdk.flaky_front import flaky_front


async def test_publish_then_read_its_status(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    occurred = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    async with open_client(server, api_tenant.key) as client:
        result = await client.publish(
            "order.created", order(1), partition_key="c-1", headers={"source-app": "checkout"}, occurred_at=occurred
        )
        assert result.status == "accepted"
        assert not result.spooled
        assert not result.replayed
        assert result.event_id is not None
        assert result.event_id.startswith("evt_")
        assert (result.event_type, result.schema_version) == ("order.created", 1)
        assert result.received_at is not None
        assert result.received_at.tzinfo is not None
        assert result.location == f"/v1/events/{result.event_id}"

        status = await client.get_event(result.event_id)
        assert (status.event_id, status.event_type, status.status) == (result.event_id, "order.created", "pending")
        assert (status.attempts, status.kafka, status.published_at) == (0, None, None)
        assert status.received_at == result.received_at

        found = await client.find_event(result.idempotency_key)
        assert found is not None
        assert found.event_id == result.event_id


async def test_the_same_key_again_is_a_replay_not_a_second_event(
    server: str, api_tenant: Tenant, open_client: Opener
) -> None:
    async with open_client(server, api_tenant.key) as client:
        key = "order-7-created-" + secrets.token_hex(4)
        first = await client.publish("order.created", order(7), idempotency_key=key)
        again = await client.publish("order.created", order(7), idempotency_key=key)
        assert (first.replayed, again.replayed) == (False, True)
        assert again.event_id == first.event_id
        assert again.idempotency_key == key

        with pytest.raises(ValidationError) as reused:  # same key, another body: refused, not stored
            await client.publish("order.created", order(8), idempotency_key=key)
        assert reused.value.type.endswith("idempotency-key-reused")


async def test_a_batch_is_one_call_under_one_key(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    async with open_client(server, api_tenant.key) as client:
        events = [Event("order.created", order(n), partition_key="c-9") for n in range(3)]
        batch = await client.publish_batch(events)
        assert batch.status == "accepted"
        assert not batch.replayed
        assert len(batch.events) == 3
        assert len({e.event_id for e in batch.events}) == 3
        assert {e.idempotency_key for e in batch.events} == {batch.idempotency_key}

        landed = await client.check_landed(batch.idempotency_key)
        assert landed.batch
        assert [e.event_id for e in landed.events] == [e.event_id for e in batch.events]
        with pytest.raises(ValueError, match="batch"):
            await client.find_event(batch.idempotency_key)

        again = await client.publish_batch(events, idempotency_key=batch.idempotency_key)
        assert again.replayed
        assert [e.event_id for e in again.events] == [e.event_id for e in batch.events]

        with pytest.raises(ValidationError) as invalid:
            await client.publish_batch([events[0], Event("order.created", order(1, amount="lots"))])
        assert [e.pointer for e in invalid.value.errors] == ["/events/1/payload/amount"]


async def test_an_unknown_key_has_not_landed(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    async with open_client(server, api_tenant.key) as client:
        assert await client.find_event("never-used") is None
        landed = await client.check_landed("never-used")
        assert (landed.landed, landed.next_step) == (False, NextStep.REPUBLISH_SAME_KEY)


async def test_schemas_are_registered_once(server: str, api_tenant: Tenant, open_client: Opener) -> None:
    schema = {"type": "object", "properties": {"sku": {"type": "string"}}}
    async with open_client(server, api_tenant.key) as client:
        first = await client.register_schema("stock.moved", schema)
        again = await client.register_schema("stock.moved", schema)
        assert (first.event_type, first.version, first.compatibility, first.created) == (
            "stock.moved",
            1,
            "BACKWARD",
            True,
        )
        assert (again.version, again.created) == (1, False)
        result = await client.publish("stock.moved", {"sku": "mug"})
        assert result.schema_version == 1


async def test_errors_are_typed_and_other_4xx_are_not_retried(
    server: str, api_tenant: Tenant, open_client: Opener
) -> None:
    """Each refusal reaches the caller after exactly one request: the front counts them."""
    read_only = create_tenant(server, scopes=["events:read"])
    with flaky_front(server) as front:
        async with open_client(front.url, api_tenant.key) as client:
            with pytest.raises(ValidationError) as invalid:
                await client.publish("order.created", {"order_id": "o-1", "amount": "x"})
            assert invalid.value.status == 422
            assert [e.pointer for e in invalid.value.errors] == ["/payload/amount"]
            assert invalid.value.errors[0].message
            assert not invalid.value.retriable
            assert len(front.seen) == 1

            with pytest.raises(ValidationError) as unknown_type:
                await client.publish("order.refunded", {})
            assert unknown_type.value.errors[0].pointer == "/event_type"

            with pytest.raises(NotFoundError):
                await client.get_event("evt_01M7YHMR0709BNNTSHMGF0ZP84")

            incompatible = {"type": "object", "properties": {"amount": {"type": "string"}}}
            with pytest.raises(ConflictError) as conflict:  # a real conflict: never retried, unlike "key in flight"
                await client.register_schema("order.created", incompatible)
            assert any(e.pointer.startswith("/schema") for e in conflict.value.errors)
            assert len(front.seen) == 4

        async with open_client(front.url, "evk_nobody_nothing") as client:
            with pytest.raises(AuthenticationError) as unauthenticated:
                await client.publish("order.created", order(1))
            assert unauthenticated.value.status == 401
        async with open_client(front.url, read_only.key) as client:
            with pytest.raises(PermissionDeniedError):
                await client.publish("order.created", order(1))
        assert len(front.seen) == 6
