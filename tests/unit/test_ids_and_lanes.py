from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events_api.ids import event_id_time, new_event_id, new_key_id, truncate_to_millis
from events_api.lanes import LANES, lane_for


def test_event_id_encodes_its_received_at() -> None:
    at = truncate_to_millis(datetime(2026, 11, 21, 8, 30, 12, 345678, tzinfo=UTC))
    event_id = new_event_id(at)
    assert event_id.startswith("evt_")
    assert len(event_id) == 30
    assert event_id_time(event_id) == at


def test_event_ids_sort_by_time() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [new_event_id(at + timedelta(milliseconds=i), lambda n: b"\xff" * n) for i in range(0, 5000, 7)]
    assert ids == sorted(ids)


def test_random_is_injectable_and_malformed_ids_have_no_time() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert new_event_id(at, bytes) == new_event_id(at, bytes)
    for bad in ["", "evt_", "evt_short", "key_01M7YHMR0709BNNTSHMGF0ZP84", "evt_ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "x" * 300]:
        assert event_id_time(bad) is None
    assert new_key_id().startswith("key_")


def test_lanes_are_stable_and_spread() -> None:
    assert lane_for("acme", "order-1") == lane_for("acme", "order-1")
    lanes = {lane_for("acme", f"order-{i}") for i in range(5000)}
    assert len(lanes) == LANES
    assert all(0 <= lane < LANES for lane in lanes)
