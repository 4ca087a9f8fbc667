"""Ordering lanes: every (tenant, partition key) maps to one of `LANES` lanes.

The relay publishes each lane in sequence order and only one relay owns a lane at a time, which is
what keeps per-key order across several relays. The count is part of the stored data: changing it
would re-home keys while events are pending, so it is a constant, not a setting.
"""

from __future__ import annotations

import hashlib

LANES = 256


def lane_for(tenant_id: str, ordering_key: str) -> int:
    """Stable across processes and versions (Python's `hash` is salted per process)."""
    digest = hashlib.blake2b(f"{tenant_id}\x00{ordering_key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % LANES
