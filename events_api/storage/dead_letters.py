"""A tenant's dead letters: listing them, and moving them back into the outbox (redrive)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, delete, func, insert, literal, select, text, tuple_

from events_api.storage.audit import record
from events_api.storage.database import Database
from events_api.storage.partitions import PARTITION_LOCK_SQL, ensure_partitions
from events_api.storage.tables import dead_letters, outbox


@dataclass(frozen=True, slots=True)
class DeadLetter:
    event_id: str
    event_type: str
    schema_version: int
    partition_key: str | None
    attempts: int
    last_error: str
    original_topic: str | None
    received_at: datetime
    dead_lettered_at: datetime


# The columns a redriven event takes back into the outbox, in the outbox's names.
# Due at once, whichever host's clock the relay compares it with.
NOW_DUE = datetime(1, 1, 1, tzinfo=UTC)
_BACK = (
    "tenant_id",
    "event_id",
    "received_at",
    "event_type",
    "schema_version",
    "partition_key",
    "lane",
    "idempotency_key",
    "payload",
    "headers",
    "traceparent",
    "occurred_at",
)


class DeadLetterStore:
    """Every query is scoped to `tenant_id`, fixed at construction."""

    def __init__(self, db: Database, tenant_id: str) -> None:
        self.db = db
        self.tenant_id = tenant_id

    async def page(self, *, event_type: str | None, limit: int, after: tuple[datetime, str] | None) -> list[DeadLetter]:
        """list_dead_letters: oldest first, after the (dead_lettered_at, event_id) of the previous page."""
        stmt = select(
            dead_letters.c.event_id,
            dead_letters.c.event_type,
            dead_letters.c.schema_version,
            dead_letters.c.partition_key,
            dead_letters.c.attempts,
            dead_letters.c.last_error,
            dead_letters.c.original_topic,
            dead_letters.c.received_at,
            dead_letters.c.dead_lettered_at,
        ).where(dead_letters.c.tenant_id == self.tenant_id)
        if event_type is not None:
            stmt = stmt.where(dead_letters.c.event_type == event_type)
        if after is not None:
            stmt = stmt.where(tuple_(dead_letters.c.dead_lettered_at, dead_letters.c.event_id) > tuple_(*after))
        stmt = stmt.order_by(dead_letters.c.dead_lettered_at, dead_letters.c.event_id).limit(limit)
        async with self.db.autocommit() as conn:
            return [DeadLetter(*row) for row in await conn.execute(stmt)]

    async def redrive(
        self, *, event_ids: Sequence[str] | None, event_type: str | None, now: datetime, actor: str
    ) -> int:
        """redrive_dead_letters: move the chosen dead letters back into the outbox, at the end of their lanes,
        with their attempts reset. Returns how many moved."""
        chosen = [dead_letters.c.tenant_id == self.tenant_id]
        if event_ids is not None:
            chosen.append(dead_letters.c.event_id.in_(list(event_ids)))
        if event_type is not None:
            chosen.append(dead_letters.c.event_type == event_type)
        async with self.db.transaction() as conn:
            # lock_partition_ddl: maintenance cannot drop a day's partition between the check below and the insert
            await conn.execute(text(PARTITION_LOCK_SQL))
            day = func.date_trunc("day", dead_letters.c.received_at, "UTC")
            days = (await conn.execute(select(day).where(and_(*chosen)).distinct())).scalars()
            # Their day's partition may have been dropped meanwhile (nothing pending was left in it).
            await ensure_partitions(conn, sorted({at.astimezone(UTC).date() for at in days}))
            moved = (
                delete(dead_letters)
                .where(and_(*chosen))
                .returning(dead_letters.c.seq, *(dead_letters.c[name] for name in _BACK))
            )
            moved_cte = moved.cte("moved")
            stmt = (
                insert(outbox)
                .from_select(
                    [*_BACK, "state", "attempts", "next_attempt_at"],
                    select(
                        *(moved_cte.c[name] for name in _BACK), literal("pending"), literal(0), literal(NOW_DUE)
                    ).order_by(moved_cte.c.seq),  # new sequence numbers in the order they were first accepted
                )
                .returning(outbox.c.event_id)
            )
            count = len((await conn.execute(stmt)).all())  # from the rows: rowcount is not reported for this form
            if count:
                details: dict[str, Any] = {"count": count, "event_type": event_type}
                target = event_ids[0] if event_ids is not None and len(event_ids) == 1 else None
                await record(
                    conn,
                    tenant_id=self.tenant_id,
                    actor=actor,
                    action="dead_letters.redriven",
                    at=now,
                    target=target,
                    details=details,
                )
            return count
