"""Per-tenant ingest rate limits: events/s and bytes/s as token buckets in Redis, shared by every API
replica and worker.

- One Lua script takes from both buckets atomically, on Redis's clock (replica clocks do not matter).
- A worker takes a small *lease* of tokens at a time (what the request needs plus a twentieth of a
  second's worth) and spends it locally, so a busy tenant costs one Redis round trip per lease, not
  per request. Leased tokens are gone from the bucket, so the limit is never exceeded; a lease unused
  after a second is dropped, which can only admit less.
- A bucket holds at least two seconds of its rate and at least one largest request (MAX_BATCH_EVENTS
  events, MAX_BODY_BYTES bytes), so every valid request can pass eventually; a refused one gets 429
  with `Retry-After` (whole seconds until enough tokens are back).
- Limits come from `tenant_rate_limits` (admin endpoint), else the EVENTS_API_RATE_LIMIT_* defaults;
  0 means unlimited. Each worker re-reads a tenant's limits every LIMITS_TTL seconds.
- Without EVENTS_API_REDIS_URL there are no limits. When Redis fails, ingest goes on without limits
  (fail open): logged at most every LOG_EVERY seconds, counted in `fail_open_total` and on /metrics
  (`rate_limit_fail_open_total`), and Redis is left alone for BACKOFF seconds so a dead Redis adds no latency.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as redis
from redis.exceptions import RedisError

from events_api.errors import RateLimited, StorageUnavailable
from events_api.metrics import api_metrics
from events_api.storage.platform import PlatformStore, RateLimits

log = logging.getLogger("events_api.ratelimit")

LEASE_FRACTION = 0.05  # of a second's rate, taken from Redis at a time
LEASE_SECONDS = 1.0
LIMITS_TTL = 5.0
BURST_SECONDS = 2
BACKOFF = 1.0
LOG_EVERY = 10.0
REDIS_TIMEOUT = 0.1
KEY_PREFIX = "events-api:rate:"
MAX_TENANTS = 100_000  # cached limits and leases per worker, dropped wholesale past this
UNLIMITED = 2**62

# KEYS: events bucket, bytes bucket. ARGV: per bucket (rate, capacity, need, want); rate 0 = no limit.
# Takes `want` (at least `need`) from each limited bucket, or nothing when one holds less than `need`.
# Returns {events granted, bytes granted, seconds to wait (a string: Lua numbers lose their fraction)}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state, wait = {}, 0
for i = 1, 2 do
  local rate, cap, need = tonumber(ARGV[i*4-3]), tonumber(ARGV[i*4-2]), tonumber(ARGV[i*4-1])
  if rate > 0 then
    local b = redis.call('HMGET', KEYS[i], 'tokens', 'at')
    local tokens = tonumber(b[1]) or cap
    local at = tonumber(b[2]) or now
    tokens = math.min(cap, tokens + math.max(0, now - at) * rate)
    state[i] = tokens
    if tokens < need then wait = math.max(wait, (need - tokens) / rate) end
  end
end
local granted = {0, 0}
for i = 1, 2 do
  local rate, cap, want = tonumber(ARGV[i*4-3]), tonumber(ARGV[i*4-2]), tonumber(ARGV[i*4])
  if rate > 0 then
    local tokens = state[i]
    if wait == 0 then
      granted[i] = math.min(want, math.floor(tokens))
      tokens = tokens - granted[i]
    end
    redis.call('HSET', KEYS[i], 'tokens', tostring(tokens), 'at', tostring(now))
    redis.call('PEXPIRE', KEYS[i], math.ceil(cap / rate * 1000) + 1000)
  end
end
return {granted[1], granted[2], tostring(wait)}
"""


@dataclass(slots=True)
class _Lease:
    events: int
    bytes: int
    until: float


@dataclass(frozen=True, slots=True)
class _Grant:
    events: int
    bytes: int
    wait: float


@dataclass(frozen=True, slots=True)
class Effective:
    events_per_second: int
    bytes_per_second: int


class RateLimiter:
    def __init__(
        self,
        redis_url: str | None,
        store: PlatformStore,
        defaults: Effective,
        *,
        largest_request: Effective,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.defaults = defaults
        self.largest = largest_request
        self.monotonic = monotonic
        self.fail_open_total = 0
        self.limited_total = 0
        self._client = (
            None
            if redis_url is None
            else redis.Redis.from_url(redis_url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
        )
        self._script = None if self._client is None else self._client.register_script(_TAKE)
        self._limits: dict[str, tuple[Effective, float]] = {}
        self._leases: dict[str, _Lease] = {}
        self._redis_back_at = 0.0
        self._logged_at = -math.inf

    def effective(self, configured: RateLimits) -> Effective:
        return Effective(
            self.defaults.events_per_second if configured.events_per_second is None else configured.events_per_second,
            self.defaults.bytes_per_second if configured.bytes_per_second is None else configured.bytes_per_second,
        )

    def forget(self, tenant_id: str) -> None:
        """This worker changed the tenant's limits: use the new ones at once."""
        self._limits.pop(tenant_id, None)
        self._leases.pop(tenant_id, None)

    async def admit(self, tenant_id: str, events: int, size: int) -> None:
        """Take `events` and `size` bytes from the tenant's buckets, or raise RateLimited (429)."""
        if self._script is None:
            return
        limits = await self._limits_of(tenant_id)
        if not limits.events_per_second and not limits.bytes_per_second:
            return
        now = self.monotonic()
        lease = self._leases.get(tenant_id)
        if lease is None or lease.until <= now:
            lease = _Lease(0, 0, now + LEASE_SECONDS)
        elif lease.events >= events and lease.bytes >= size:
            lease.events -= events
            lease.bytes -= size
            return
        if now < self._redis_back_at:
            return
        try:
            granted = await self._take(tenant_id, limits, max(0, events - lease.events), max(0, size - lease.bytes))
        except (RedisError, OSError) as exc:
            self._fail_open(now, exc)
            return
        if granted.wait > 0:
            self.limited_total += 1
            api_metrics().rate_limited.inc()
            raise RateLimited(
                f"tenant {tenant_id!r} is over its ingest rate limit ({_describe(limits)}); retry later",
                headers={"Retry-After": str(max(1, math.ceil(granted.wait)))},
            )
        if len(self._leases) > MAX_TENANTS:
            self._leases.clear()
        self._leases[tenant_id] = _Lease(
            lease.events + granted.events - events, lease.bytes + granted.bytes - size, now + LEASE_SECONDS
        )

    async def _take(self, tenant_id: str, limits: Effective, events: int, size: int) -> _Grant:
        """The tokens granted (at least what was needed; an unlimited dimension grants plenty), or the wait."""
        assert self._script is not None
        args: list[int] = []
        for rate, largest, need in (
            (limits.events_per_second, self.largest.events_per_second, events),
            (limits.bytes_per_second, self.largest.bytes_per_second, size),
        ):
            capacity = max(BURST_SECONDS * rate, largest)
            want = min(capacity, need + math.floor(rate * LEASE_FRACTION))
            args += [rate, capacity, need, want]
        keys = [f"{KEY_PREFIX}{tenant_id}:events", f"{KEY_PREFIX}{tenant_id}:bytes"]
        got_events, got_bytes, wait = await self._script(keys=keys, args=args)
        return _Grant(
            int(got_events) if limits.events_per_second else UNLIMITED,
            int(got_bytes) if limits.bytes_per_second else UNLIMITED,
            float(wait),
        )

    async def _limits_of(self, tenant_id: str) -> Effective:
        now = self.monotonic()
        cached = self._limits.get(tenant_id)
        if cached is not None and now - cached[1] < LIMITS_TTL:
            return cached[0]
        try:
            limits = self.effective(await self.store.get_rate_limits(tenant_id))
        except StorageUnavailable:
            # The write that follows will answer 503; until the database is back, keep what we knew.
            return self.defaults if cached is None else cached[0]
        self._limits[tenant_id] = (limits, now)
        if len(self._limits) > MAX_TENANTS:
            self._limits.clear()
        return limits

    def _fail_open(self, now: float, exc: BaseException) -> None:
        self.fail_open_total += 1
        api_metrics().rate_limit_fail_open.inc()
        self._redis_back_at = now + BACKOFF
        if now - self._logged_at >= LOG_EVERY:
            self._logged_at = now
            log.warning("rate limits not enforced: Redis unavailable (%s); accepting events", type(exc).__name__)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _describe(limits: Effective) -> str:
    parts = []
    if limits.events_per_second:
        parts.append(f"{limits.events_per_second} events/s")
    if limits.bytes_per_second:
        parts.append(f"{limits.bytes_per_second} bytes/s")
    return ", ".join(parts)
