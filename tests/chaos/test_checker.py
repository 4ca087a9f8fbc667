"""The delivery checker itself: it must see every kind of broken promise, and accept what at least once allows."""

from __future__ import annotations

from tests.chaos.checker import Accepted, Seen, check

ACCEPTED = [Accepted(f"e{k}{n}", f"k{k}", n) for k in range(2) for n in range(3)]


def _seen(*ids: str, generation: int = 0, partition_of: dict[str, int] | None = None) -> list[Seen]:
    """Records in this order, each on its key's partition (k0 -> 0, k1 -> 1) unless told otherwise."""
    offsets: dict[int, int] = {}
    records = []
    for event_id in ids:
        key = f"k{event_id[1]}"
        partition = (partition_of or {}).get(event_id, int(event_id[1]))
        offsets[partition] = offsets.get(partition, -1) + 1
        records.append(Seen(event_id, key, generation, partition, offsets[partition]))
    return records


def test_everything_once_in_order_is_clean() -> None:
    verdict = check("s", ACCEPTED, _seen("e00", "e10", "e01", "e11", "e02", "e12"))
    assert verdict.problems() == []
    assert (verdict.delivered, verdict.duplicates, verdict.records) == (6, 0, 6)
    assert verdict.line().startswith("s: accepted=6 delivered=6 lost=0 out_of_order=0 duplicates=0")


def test_a_missing_event_is_lost() -> None:
    verdict = check("s", ACCEPTED, _seen("e00", "e01", "e10", "e11", "e12"))
    assert verdict.lost == ["e02"]
    assert "1 lost: e02" in verdict.problems()


def test_an_event_after_a_later_one_of_its_key_is_out_of_order() -> None:
    verdict = check("s", ACCEPTED, _seen("e00", "e02", "e01", "e10", "e11", "e12"))
    assert verdict.out_of_order == ["e01"]
    assert verdict.problems()


def test_a_redelivered_run_is_a_duplicate_within_the_bound_not_a_reordering() -> None:
    # A relay produced e01, e02 and died before settling; the next owner sent them again.
    seen = _seen("e00", "e01", "e02", "e01", "e02", "e10", "e11", "e12")
    verdict = check("s", ACCEPTED, seen, in_flight={"e01", "e02"}, bound=2)
    assert verdict.problems() == []
    assert (verdict.duplicates, verdict.out_of_order) == (2, [])


def test_duplicates_beyond_the_bound_or_outside_the_in_flight_set_are_problems() -> None:
    seen = _seen("e00", "e01", "e01", "e02", "e10", "e10", "e11", "e12")
    over = check("s", ACCEPTED, seen, in_flight={"e01", "e10"}, bound=1)
    assert any("more than the 1" in p for p in over.problems())
    outside = check("s", ACCEPTED, seen, in_flight={"e01"}, bound=5)
    assert outside.duplicated_outside_in_flight == ["e10"]


def test_an_event_no_client_was_told_about_is_unexpected() -> None:
    verdict = check("s", ACCEPTED, _seen("e00", "e01", "e02", "e10", "e11", "e12", "e13"))
    assert verdict.unexpected == ["e13"]
    assert verdict.problems()


def test_a_key_spread_over_partitions_is_misplaced() -> None:
    verdict = check("s", ACCEPTED, _seen("e00", "e01", "e02", "e10", "e11", "e12", partition_of={"e01": 1}))
    assert verdict.misplaced == ["e00", "e01", "e02"]


def test_broker_generations_are_read_in_order() -> None:
    # The old broker held e00 and e01 (e01 unsettled), the new one got e01 again, then the rest.
    seen = _seen("e00", "e01", "e10") + _seen("e01", "e02", "e11", "e12", generation=1)
    verdict = check("s", ACCEPTED, list(reversed(seen)), in_flight={"e01"}, bound=1)
    assert verdict.problems() == []
    assert verdict.duplicates == 1
