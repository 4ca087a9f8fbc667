"""Group commit for the outbox: concurrent accepts share one statement and one commit.

Requests queue their acceptance; a few flusher tasks each take everything queued and write it with
one statement, then resolve every request from that statement's result. There is no timer: under
light load a request is written alone at once; under load, requests gather while the flushers are
busy, so the cost of a statement and a commit is shared. A request is answered only after the
commit that holds it.

Each request in a group is still all or nothing and still checks its own API key and idempotency
key. One request's bad data must not fail its neighbours: when a group fails for any reason other
than the database being unavailable, its requests are written again one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import psycopg

from events_api.errors import Problem, StorageUnavailable
from events_api.storage.database import Database
from events_api.storage.events import Acceptance, Accepted, NewEvent
from events_api.storage.partitions import ensure_partitions

log = logging.getLogger("events_api.storage")

FLUSHERS = 4
MAX_GROUP_REQUESTS = 256
MAX_GROUP_EVENTS = 5000
DEADLOCK_RETRIES = 3

# accept_event_groups: for each request of the group whose API key is live, claim (tenant, key) unless a
# live claim exists, and append its events if claimed. One row per request says what happened to it.
# The group arrives as two JSON documents (requests, events) encoded by msgspec in C and each parsed
# once by json_to_recordset: far cheaper than dumping arrays per column. Payloads travel base64-encoded,
# because PostgreSQL's JSON parser refuses \u0000, which is valid JSON and must reach Kafka untouched.
_ACCEPT_GROUP = """
WITH req AS (
    SELECT * FROM json_to_recordset(CAST(%(requests)s AS json)) AS r(
        ord int, tenant_id text, api_key_id text, key text, operation text, fingerprint text, event_ids text[],
        status smallint, body json, received_at timestamptz, expires_at timestamptz, traceparent text)
), live AS (
    -- The key is checked here, not only when cached: a revocation binds on every replica at once.
    -- FOR SHARE: a revocation committed while this waits is seen (the row is re-checked), and one that
    -- comes later waits for this statement, so no event is accepted after its key's revocation committed.
    SELECT r.* FROM req r JOIN api_keys k ON k.id = r.api_key_id AND k.tenant_id = r.tenant_id
    WHERE k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > r.received_at)
    FOR SHARE OF k
), claimed AS (
    INSERT INTO idempotency_keys AS k
        (tenant_id, key, operation, fingerprint, event_ids, response_status, response_body, created_at, expires_at)
    SELECT tenant_id, key, operation, decode(fingerprint, 'hex'), event_ids, status,
           convert_to(CAST(body AS text), 'UTF8'), received_at, expires_at
    FROM live
    ORDER BY tenant_id, key  -- one lock order for every statement: concurrent groups cannot deadlock
    ON CONFLICT (tenant_id, key) DO UPDATE
        SET operation = excluded.operation, fingerprint = excluded.fingerprint, event_ids = excluded.event_ids,
            response_status = excluded.response_status, response_body = excluded.response_body,
            created_at = excluded.created_at, expires_at = excluded.expires_at
        WHERE k.expires_at <= excluded.created_at
    RETURNING k.tenant_id, k.key
), stored AS (
    INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, partition_key, lane,
                        idempotency_key, payload, headers, traceparent, occurred_at, next_attempt_at)
    SELECT r.received_at, e.event_id, r.tenant_id, e.event_type, e.schema_version, e.partition_key, e.lane,
           r.key, decode(e.payload, 'base64'), e.headers, r.traceparent, e.occurred_at,
           TIMESTAMPTZ '0001-01-01 00:00:00+00'  -- due at once, whatever the relay's clock says
    FROM json_to_recordset(CAST(%(events)s AS json)) AS e(
        req int, ord int, event_id text, event_type text, schema_version int, partition_key text, lane smallint,
        payload text, headers jsonb, occurred_at timestamptz)
    JOIN req r ON r.ord = e.req
    WHERE EXISTS (SELECT FROM claimed c WHERE c.tenant_id = r.tenant_id AND c.key = r.key)
    ORDER BY e.ord
)
SELECT r.ord,
       EXISTS (SELECT FROM live l WHERE l.ord = r.ord) AS caller_live,
       EXISTS (SELECT FROM claimed c WHERE c.tenant_id = r.tenant_id AND c.key = r.key) AS claimed
FROM req r
"""


class _RequestRow(msgspec.Struct):
    ord: int
    tenant_id: str
    api_key_id: str
    key: str
    operation: str
    fingerprint: str
    event_ids: list[str]
    status: int
    body: msgspec.Raw
    received_at: datetime
    expires_at: datetime
    traceparent: str | None


class _EventRow(msgspec.Struct):
    req: int
    ord: int
    event_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    lane: int
    payload: bytes  # msgspec encodes bytes as base64
    headers: dict[str, str] | None
    occurred_at: datetime | None


_encode = msgspec.json.Encoder().encode


@dataclass(eq=False)
class _Pending:
    tenant_id: str
    api_key_id: str
    acceptance: Acceptance
    events: Sequence[NewEvent]
    done: asyncio.Future[Accepted] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def claim(self) -> tuple[str, str]:
        return self.tenant_id, self.acceptance.idempotency_key


def _parameters(group: Sequence[_Pending]) -> dict[str, Any]:
    requests = [
        _RequestRow(
            ord=i,
            tenant_id=p.tenant_id,
            api_key_id=p.api_key_id,
            key=p.acceptance.idempotency_key,
            operation=p.acceptance.operation,
            fingerprint=p.acceptance.fingerprint.hex(),
            event_ids=[e.event_id for e in p.events],
            status=p.acceptance.response_status,
            body=msgspec.Raw(p.acceptance.response_body),
            received_at=p.acceptance.received_at,
            expires_at=p.acceptance.expires_at,
            traceparent=p.acceptance.traceparent,
        )
        for i, p in enumerate(group)
    ]
    events = [
        _EventRow(
            i,
            n,
            e.event_id,
            e.event_type,
            e.schema_version,
            e.partition_key,
            e.lane,
            e.payload,
            e.headers,
            e.occurred_at,
        )
        for n, (i, e) in enumerate((i, e) for i, p in enumerate(group) for e in p.events)
    ]
    return {"requests": _encode(requests).decode(), "events": _encode(events).decode()}


class OutboxWriter:
    """One per process. `accept` returns once the request's events are committed (or not stored)."""

    def __init__(self, db: Database, *, flushers: int = FLUSHERS) -> None:
        self.db = db
        self.flusher_count = flushers
        self._queue: deque[_Pending] = deque()
        self._wake = asyncio.Event()
        self._flushers: list[asyncio.Task[None]] = []
        # Observable by tests and (later) metrics: statements run, and requests they carried.
        self.statements = 0
        self.requests_written = 0

    async def accept(
        self, tenant_id: str, api_key_id: str, acceptance: Acceptance, events: Sequence[NewEvent]
    ) -> Accepted:
        """Store the events under the idempotency key atomically, or nothing (and say why)."""
        if not self._flushers:
            self._flushers = [asyncio.create_task(self._flush_forever()) for _ in range(self.flusher_count)]
        pending = _Pending(tenant_id, api_key_id, acceptance, events)
        self._queue.append(pending)
        self._wake.set()
        # Shielded: a client that goes away does not cancel a write others share; its retry will replay.
        return await asyncio.shield(pending.done)

    async def close(self) -> None:
        for task in self._flushers:
            task.cancel()
        await asyncio.gather(*self._flushers, return_exceptions=True)
        self._flushers = []
        while self._queue:
            self._queue.popleft().done.set_exception(StorageUnavailable("the service is shutting down"))

    def _take_group(self) -> list[_Pending]:
        """The queued requests, oldest first, without two for one (tenant, key) and within the size limits."""
        group: list[_Pending] = []
        claims: set[tuple[str, str]] = set()
        deferred: list[_Pending] = []
        events = 0
        while self._queue and len(group) < MAX_GROUP_REQUESTS:
            pending = self._queue[0]
            if group and events + len(pending.events) > MAX_GROUP_EVENTS:
                break
            self._queue.popleft()
            if pending.claim in claims:
                deferred.append(pending)
                continue
            claims.add(pending.claim)
            group.append(pending)
            events += len(pending.events)
        self._queue.extendleft(reversed(deferred))
        # The statement claims keys in this order; every group using one order keeps groups from deadlocking.
        group.sort(key=lambda p: p.claim)
        return group

    async def _flush_forever(self) -> None:
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            group = self._take_group()
            try:
                await self._write(group)
            except StorageUnavailable as exc:
                for pending in group:
                    self._settle_error(pending, StorageUnavailable(exc.detail))
            except Exception as exc:
                if len(group) == 1:
                    self._settle_error(group[0], exc)
                    continue
                # Find out whose data it was: each request alone, so only that one fails.
                for pending in group:
                    try:
                        await self._write([pending])
                    except Exception as alone:
                        self._settle_error(pending, alone)

    @staticmethod
    def _settle_error(pending: _Pending, exc: Exception) -> None:
        if pending.done.done():
            return
        if not isinstance(exc, Problem):
            log.error("writing to the outbox failed", exc_info=exc)
            exc = StorageUnavailable("writing the events failed; nothing was stored")
        pending.done.set_exception(exc)

    @staticmethod
    async def _execute(conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The statement, again if PostgreSQL broke a lock cycle with another writer (nothing was stored)."""
        for attempt in range(DEADLOCK_RETRIES):
            try:
                return await (await conn.execute(_ACCEPT_GROUP, params)).fetchall()
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                if attempt == DEADLOCK_RETRIES - 1:
                    raise
                log.warning("outbox write hit a lock conflict; retrying")
        raise AssertionError("unreachable")

    async def _write(self, group: Sequence[_Pending]) -> None:
        params = _parameters(group)
        self.statements += 1
        self.requests_written += len(group)
        async with self.db.autocommit_driver() as conn:
            try:
                rows = await self._execute(conn, params)
            except psycopg.errors.CheckViolation as exc:
                if "no partition" not in str(exc):
                    raise
                # Partitions are made days ahead; this is the backstop if that ever fell behind.
                days = sorted({p.acceptance.received_at.astimezone(UTC).date() for p in group})
                async with self.db.transaction() as ddl:
                    await ensure_partitions(ddl, days)
                rows = await self._execute(conn, params)
        for ord_, caller_live, claimed in rows:
            outcome = Accepted.STORED if claimed else Accepted.KEY_TAKEN
            if not caller_live:
                outcome = Accepted.CALLER_NOT_LIVE
            with contextlib.suppress(asyncio.InvalidStateError):
                group[ord_].done.set_result(outcome)
