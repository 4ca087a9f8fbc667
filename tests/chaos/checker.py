"""The delivery checker of the chaos suite: what the clients were told was accepted, against what Kafka holds.

Pure functions over plain data, so they are tested directly (`test_checker.py`) and the scenarios only feed them:

- `accepted`: every event a client got a 202 for, with its partition key and its position in that key's accept
  order (the clients publish each key's events one after another, so the order of the 202s is the accept order);
- `seen`: every record read back from the topic, in the order Kafka holds it: broker generation (a Tansu restart
  starts an empty broker), then partition, then offset. A key lives on one partition, so this is the key's order;
- `in_flight`: the ids that were pending in the outbox, in the lanes of a relay that was about to die (or of every
  relay, when the database or the broker went away), captured while those relays were frozen, and `bound`, how many
  of them could have been sent twice (each dying relay had at most one batch in flight).

Verdict: delivered (distinct accepted ids seen), lost (accepted, never seen: must be 0), out of order (seen after a
later event of its key, counting first deliveries only: must be 0), duplicates (records beyond the first of an id:
at least once allows them, but only for ids that were in flight and no more than `bound`), unexpected (ids no client
was told about: two events for one idempotency key, must be 0), and keys whose records were on the wrong key or
spread over partitions within one broker generation (must be 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field

SAMPLES = 5  # ids quoted per kind of problem


@dataclass(frozen=True, slots=True)
class Accepted:
    """An event a client got a 202 for."""

    event_id: str
    key: str
    position: int  # in the key's accept order, from 0


@dataclass(frozen=True, slots=True)
class Seen:
    """A record read back from Kafka (`ce_id` header, record key, where it was)."""

    event_id: str
    key: str | None
    generation: int
    partition: int
    offset: int


@dataclass(slots=True)
class Verdict:
    scenario: str
    accepted: int
    delivered: int
    records: int
    lost: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    duplicates: int = 0
    bound: int = 0
    duplicated_outside_in_flight: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)  # wrong record key, or a key on two partitions

    def line(self) -> str:
        """The one-line summary the suite prints for each scenario."""
        return (
            f"{self.scenario}: accepted={self.accepted} delivered={self.delivered} lost={len(self.lost)} "
            f"out_of_order={len(self.out_of_order)} duplicates={self.duplicates} in_flight_bound={self.bound} "
            f"unexpected={len(self.unexpected)} misplaced={len(self.misplaced)} records={self.records}"
        )

    def problems(self) -> list[str]:
        """Every broken promise, with a few ids each; empty when delivery kept the contract."""
        found: list[str] = []
        for name, ids in (
            ("lost", self.lost),
            ("out of order", self.out_of_order),
            ("duplicated although not in flight at a fault", self.duplicated_outside_in_flight),
            ("never accepted (a second event for one key?)", self.unexpected),
            ("on the wrong key or partition", self.misplaced),
        ):
            if ids:
                found.append(f"{len(ids)} {name}: {', '.join(ids[:SAMPLES])}")
        if self.duplicates > self.bound:
            found.append(f"{self.duplicates} duplicates, more than the {self.bound} that were in flight at faults")
        return found


def check(
    scenario: str,
    accepted: Sequence[Accepted],
    seen: Iterable[Seen],
    *,
    in_flight: Set[str] = frozenset(),
    bound: int = 0,
) -> Verdict:
    by_id = {a.event_id: a for a in accepted}
    if len(by_id) != len(accepted):
        raise ValueError("an event id was accepted twice: the load generator's record is inconsistent")
    ordered = sorted(seen, key=lambda s: (s.generation, s.partition, s.offset))
    copies = Counter(s.event_id for s in ordered)
    verdict = Verdict(scenario, accepted=len(accepted), delivered=0, records=len(ordered), bound=bound)
    verdict.unexpected = sorted(i for i in copies if i not in by_id)
    verdict.delivered = sum(1 for i in copies if i in by_id)
    verdict.lost = sorted(a.event_id for a in accepted if a.event_id not in copies)
    verdict.duplicates = sum(n - 1 for i, n in copies.items() if i in by_id)
    verdict.duplicated_outside_in_flight = sorted(i for i, n in copies.items() if n > 1 and i not in in_flight)

    last: dict[str, int] = {}  # per key: the highest position delivered so far (first deliveries only)
    firsts: set[str] = set()
    homes: dict[tuple[str, int], set[int]] = {}  # (key, generation) -> partitions
    misplaced: set[str] = set()
    for record in ordered:
        event = by_id.get(record.event_id)
        if event is None:
            continue
        if record.key != event.key:
            misplaced.add(event.event_id)
        homes.setdefault((event.key, record.generation), set()).add(record.partition)
        if event.event_id in firsts:
            continue
        firsts.add(event.event_id)
        if event.position < last.get(event.key, -1):
            verdict.out_of_order.append(event.event_id)
        last[event.key] = max(event.position, last.get(event.key, -1))
    split = {key for (key, _), partitions in homes.items() if len(partitions) > 1}
    misplaced |= {a.event_id for a in accepted if a.key in split and a.event_id in copies}
    verdict.misplaced = sorted(misplaced)
    return verdict
