"""The relay's pure decisions: routing, record shape, lane plans, retry classification and backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from events_api.errors import ValidationFailed
from events_api.lanes import LANES
from events_api.routing import Routing, dead_letter_topic_for, topic_for, validate
from events_api.storage.relay import ClaimedEvent
from relay.lanes import plan
from relay.records import dead_letter_record, held_back, record_for
from relay.retry import CAP_SECONDS, MAX_ATTEMPTS, gives_up, is_permanent, retry_delay

AT = datetime(2026, 11, 21, 8, 0, 0, 123000, tzinfo=UTC)


def _event(**changes: object) -> ClaimedEvent:
    values: dict[str, object] = {
        "received_at": AT,
        "event_id": "evt_01M7YHMR0709BNNTSHMGF0ZP84",
        "seq": 1,
        "tenant_id": "acme",
        "event_type": "order.created",
        "schema_version": 3,
        "partition_key": "order-1",
        "lane": 7,
        "idempotency_key": "k",
        "payload": b'{"a":1}',
        "headers": {"source-app": "checkout"},
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "occurred_at": None,
        "attempts": 0,
    }
    values.update(changes)
    return ClaimedEvent(**values)  # type: ignore[arg-type]


def test_topics_follow_the_template_and_overrides() -> None:
    routing = Routing(topics={"order.shipped": "shipping-events"})
    assert topic_for(routing, "acme", "order.created") == "acme.order.created"
    assert topic_for(routing, "acme", "order.shipped") == "shipping-events"
    assert topic_for(Routing(topic_template="events-{tenant}"), "acme", "x") == "events-acme"
    assert dead_letter_topic_for(Routing(), "acme", "x") == "acme.dead-letter"


@pytest.mark.parametrize(
    ("routing", "pointer"),
    [
        (Routing(topic_template="{tenant}/{event_type}"), "/topic_template"),
        (Routing(topic_template="{tenant}.{name}"), "/topic_template"),
        (Routing(topic_template=""), "/topic_template"),
        (Routing(dead_letter_topic="dead letters"), "/dead_letter_topic"),
        (Routing(topics={"a.b": "bad topic"}), "/topics/a.b"),
        (Routing(topics={"a.b": ".."}), "/topics/a.b"),
        (Routing(cluster="Not A Name"), "/cluster"),
    ],
)
def test_invalid_routing_is_refused_with_pointers(routing: Routing, pointer: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        validate(routing)
    assert caught.value.errors[0].pointer == pointer


def test_record_shape_follows_the_contract() -> None:
    record = record_for(_event(), Routing())
    assert not isinstance(record, str)
    assert (record.cluster, record.topic, record.key, record.value) == (
        "default",
        "acme.order.created",
        b"order-1",
        b'{"a":1}',
    )
    headers = dict(record.headers)
    assert headers == {
        "ce_specversion": b"1.0",
        "ce_id": b"evt_01M7YHMR0709BNNTSHMGF0ZP84",
        "ce_source": b"/tenants/acme",
        "ce_type": b"order.created",
        "ce_time": b"2026-11-21T08:00:00.123Z",
        "content-type": b"application/json",
        "schema_version": b"3",
        "traceparent": b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "source-app": b"checkout",
    }
    occurred = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    keyless = record_for(_event(partition_key=None, occurred_at=occurred, traceparent=None, headers=None), Routing())
    assert not isinstance(keyless, str)
    assert keyless.key == b"evt_01M7YHMR0709BNNTSHMGF0ZP84"
    assert dict(keyless.headers)["ce_time"] == b"2026-11-20T09:00:00.000Z"
    assert "traceparent" not in dict(keyless.headers)


def test_unroutable_events_and_dead_letter_records() -> None:
    assert record_for(_event(event_type="x" * 250), Routing()) == "INVALID_TOPIC"
    dead = dead_letter_record(
        _event(),
        Routing(),
        error="MSG_SIZE_TOO_LARGE: too big",
        attempts=1,
        original_topic="acme.order.created",
        with_value=False,
    )
    assert not isinstance(dead, str)
    headers = dict(dead.headers)
    assert dead.topic == "acme.dead-letter"
    assert dead.value is None
    assert headers["error"] == b"MSG_SIZE_TOO_LARGE: too big"
    assert headers["attempts"] == b"1"
    assert headers["original_topic"] == b"acme.order.created"
    assert "value_omitted" in headers


def test_lane_plans_share_the_lanes() -> None:
    alone = plan(set(), set(), 1, shuffle=lambda lanes: None)
    assert (alone.want, len(alone.take_from), alone.release) == (LANES, LANES, [])
    two = plan(set(range(LANES)), set(range(LANES)), 2)
    assert len(two.release) == LANES // 2
    assert two.want == 0
    joining = plan(set(), set(range(LANES // 2)), 2, shuffle=lambda lanes: None)
    assert joining.want == LANES // 2
    assert set(joining.take_from) == set(range(LANES // 2, LANES))
    three = plan(set(range(10)), set(range(200)), 3)
    assert three.want == -(-LANES // 3) - 10


def test_retry_classification_and_backoff() -> None:
    assert is_permanent("MSG_SIZE_TOO_LARGE")
    assert is_permanent("UNKNOWN_CLUSTER")
    assert not is_permanent("_MSG_TIMED_OUT")
    assert not is_permanent("_TRANSPORT")
    assert not is_permanent("NOT_LEADER_FOR_PARTITION")
    assert retry_delay(0, lambda: 0.0) == 0.25
    assert retry_delay(0, lambda: 1.0) == 0.5
    assert retry_delay(3, lambda: 1.0) == 4.0
    assert retry_delay(30, lambda: 1.0) == CAP_SECONDS
    assert not gives_up(MAX_ATTEMPTS - 1)
    assert gives_up(MAX_ATTEMPTS)
    assert timedelta(seconds=retry_delay(1, lambda: 0.5)) == timedelta(seconds=0.75)


def test_a_key_sends_only_its_leading_run_to_one_destination() -> None:
    a, b = ("t", "order-1"), ("t", "order-2")
    created, shipped, other = ("default", "t.order.created"), ("default", "t.order.shipped"), ("eu", "t.x")
    keys = [a, a, b, a, a, None, b]
    destinations = [created, created, shipped, shipped, created, other, other]
    # a: created, created, then shipped -> waits, and everything of a after it waits too; b: shipped, then eu.
    assert held_back(keys, destinations) == [False, False, False, True, True, False, True]
    assert held_back([], []) == []
    assert held_back([None, None], [created, shipped]) == [False, False]
