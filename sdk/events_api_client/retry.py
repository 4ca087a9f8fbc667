"""The one retry policy of both clients: which failures are worth another attempt, and how long to wait.

Pure decisions, no I/O: the sync and async clients only differ in how they send and how they sleep.
Exponential backoff with full jitter (a random wait between 0 and the exponential ceiling, so clients
that failed together do not retry together), never shorter than the server's `Retry-After`, bounded by
a number of attempts and a total time budget. Clock and randomness are parameters, for tests.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from events_api_client.errors import EventsApiError, error_from_response, error_from_transport

# The request never left this machine: repeating it is safe for any call.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Answers that say "not now" rather than "no". 409 joins them on calls where it means "this
# Idempotency-Key is in flight" (publishes); elsewhere a 409 is a real conflict (an incompatible schema).
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How hard one logical call tries. The defaults ride out a restart or failover of the API (~30 s)."""

    max_attempts: int = 6
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    #: No attempt starts later than this many seconds after the first one.
    total_timeout: float = 30.0
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def backoff(self, failures: int, retry_after: float | None) -> float:
        """The wait after the `failures`-th failed attempt: full jitter, at least `Retry-After`."""
        ceiling = min(self.max_backoff, self.initial_backoff * 2 ** (failures - 1))
        delay: float = self.random() * ceiling
        return max(delay, retry_after) if retry_after is not None else delay


def is_transient(failure: httpx.Response | httpx.TransportError, *, idempotent: bool, conflict_in_flight: bool) -> bool:
    """Whether another attempt may succeed. A call that is not `idempotent` is repeated only when the
    failed attempt surely did nothing (never sent, or refused before any work: 429, 503)."""
    if isinstance(failure, httpx.TransportError):
        return idempotent or isinstance(failure, NOT_SENT)
    status = failure.status_code
    if not idempotent:
        return status in (429, 503)
    return status in TRANSIENT_STATUSES or status >= 500 or (status == 409 and conflict_in_flight)


class Attempts:
    """The attempts of one logical call. After each failure it either returns how long to wait before the
    next attempt, or raises the typed error of the last failure (classified, with the call's key)."""

    def __init__(
        self, policy: RetryPolicy, *, idempotent: bool, conflict_in_flight: bool, idempotency_key: str | None
    ) -> None:
        self.policy = policy
        self.idempotent = idempotent
        self.conflict_in_flight = conflict_in_flight
        self.idempotency_key = idempotency_key
        self.deadline = policy.clock() + policy.total_timeout
        self.failures = 0
        self.maybe_processed = False

    def after_failure(self, failure: httpx.Response | httpx.TransportError) -> float:
        self.failures += 1
        if isinstance(failure, httpx.TransportError):
            error: EventsApiError = error_from_transport(failure)
            # A request cut off after it was sent may have been stored; so may one answered 5xx (a
            # connection lost mid-commit is reported as 503, and a gateway may time out on a live backend).
            self.maybe_processed |= not isinstance(failure, NOT_SENT)
        else:
            error = error_from_response(failure)
            self.maybe_processed |= failure.status_code >= 500
        error.retriable = is_transient(failure, idempotent=self.idempotent, conflict_in_flight=self.conflict_in_flight)
        error.idempotency_key = self.idempotency_key
        error.outcome_unknown = self.maybe_processed
        error.attempts = self.failures
        if not error.retriable or self.failures >= self.policy.max_attempts:
            raise error from (failure if isinstance(failure, httpx.TransportError) else None)
        delay = self.policy.backoff(self.failures, error.retry_after)
        if self.policy.clock() + delay > self.deadline:
            raise error from (failure if isinstance(failure, httpx.TransportError) else None)
        return delay
