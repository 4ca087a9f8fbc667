"""How many lanes this relay should own, and which to take or give back (a pure plan).

Every live relay aims at an equal share, ceil(LANES / live relays). A relay over its share gives lanes
back between batches; one under it takes lanes nobody holds. A lane is held through a session
advisory lock, so it has one owner at a time and is free again the moment its owner's connection ends.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable, Set
from dataclasses import dataclass

from events_api.lanes import LANES


@dataclass(frozen=True, slots=True)
class LanePlan:
    release: list[int]
    take_from: list[int]  # candidates, in the order to try them
    want: int


def plan(
    owned: Set[int],
    held_by_anyone: Set[int],
    live_relays: int,
    shuffle: Callable[[list[int]], None] = _random.shuffle,
) -> LanePlan:
    share = math.ceil(LANES / max(1, live_relays))
    if len(owned) > share:
        return LanePlan(release=sorted(owned)[share:], take_from=[], want=0)
    free = [lane for lane in range(LANES) if lane not in held_by_anyone and lane not in owned]
    shuffle(free)
    return LanePlan(release=[], take_from=free, want=share - len(owned))
