"""Which delivery failures are permanent, and when to try the others again (pure functions)."""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from datetime import datetime, timedelta

MAX_ATTEMPTS = 12
BASE_SECONDS = 0.5
CAP_SECONDS = 60.0

# librdkafka / Kafka errors that no retry can fix: the event goes to the dead letters at once.
PERMANENT = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_RECORD",
        "INVALID_TOPIC_EXCEPTION",
        "_INVALID_ARG",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "UNKNOWN_CLUSTER",  # ours: the routing names a cluster this relay does not know
        "INVALID_TOPIC",  # ours: the routing renders a name Kafka cannot accept
    }
)


def is_permanent(error_name: str) -> bool:
    return error_name in PERMANENT


def retry_delay(attempts: int, random: Callable[[], float] = _random.random) -> float:
    """Exponential backoff with jitter: half to all of min(cap, base * 2^attempts) seconds."""
    ceiling = min(CAP_SECONDS, BASE_SECONDS * 2.0 ** min(attempts, 32))
    return ceiling * (0.5 + random() / 2)


def next_attempt(attempts: int, now: datetime, random: Callable[[], float] = _random.random) -> datetime:
    return now + timedelta(seconds=retry_delay(attempts, random))


def gives_up(attempts_after_this_one: int) -> bool:
    return attempts_after_this_one >= MAX_ATTEMPTS
