"""An outbox inside your own service, for SQLAlchemy users (`pip install 'events-api-client[sqlalchemy]'`).

The Events API is itself an outbox, but the call to it is still a second write beside your database
commit. When an event must exist if and only if your business change commits, stage it in your own
database, in the same transaction, and let a `Forwarder` hand it to the API afterwards:

    outbox = outbox_table(Base.metadata)            # once, beside your models (then create/migrate it)
    with Session(engine) as session, session.begin():
        session.add(order)
        stage(session, Event("order.created", {...}), table=outbox)
    Forwarder(engine, client, outbox).run()          # in a worker process

Each staged row gets its idempotency key when it is staged (`outbox-<uuid>`, in the row), so the
forwarder may crash at any point and send the row again: the API stores one event per key. Rows are
deleted in the transaction that read them, after the API accepted them; rows the API refuses for good
are marked `rejected_at` with the error and skipped, never deleted.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from events_api_client.client import EventsClient
from events_api_client.errors import EventsApiError
from events_api_client.models import Event

log = logging.getLogger("events_api_client.outbox")


def outbox_table(metadata: MetaData, name: str = "events_outbox") -> Table:
    """The outbox table, added to your metadata (create it with `metadata.create_all` or a migration)."""
    return Table(
        name,
        metadata,
        Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
        # Unique across services and database restores, unlike the row id: two services of one tenant
        # must never send different events under one key.
        Column("idempotency_key", String(255), nullable=False, unique=True),
        Column("event_type", String(255), nullable=False),
        Column("payload", JSON, nullable=False),
        Column("partition_key", String(1024)),
        Column("schema_version", Integer),
        Column("headers", JSON),
        Column("occurred_at", DateTime(timezone=True)),
        Column("staged_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("last_error", Text),
        Column("rejected_at", DateTime(timezone=True)),
    )


def stage_statement(table: Table, event: Event, *, idempotency_key: str | None = None) -> tuple[Insert, str]:
    """The INSERT that stages `event`, and its key: for `AsyncSession` or Core users who execute it."""
    key = idempotency_key or f"outbox-{uuid.uuid4()}"
    statement = insert(table).values(
        idempotency_key=key,
        event_type=event.event_type,
        payload=event.payload,
        partition_key=event.partition_key,
        schema_version=event.schema_version,
        headers=event.headers,
        occurred_at=event.occurred_at,
    )
    return statement, key


def stage(session: Session, event: Event, *, table: Table, idempotency_key: str | None = None) -> str:
    """Stage `event` in the caller's transaction: it is sent only if that transaction commits. Returns the
    idempotency key it will be published under (`find_event(key)` finds it once forwarded)."""
    statement, key = stage_statement(table, event, idempotency_key=idempotency_key)
    session.execute(statement)
    return key


@dataclass(frozen=True, slots=True)
class ForwardReport:
    """One `run_once`: rows sent (accepted by the API, deleted), rejected (kept, marked), and whether it
    stopped early because the API is unavailable."""

    sent: int
    rejected: int
    stalled: bool


class Forwarder:
    """Sends staged rows, oldest first, one publish per row under the row's key, and deletes each row once
    the API accepted it. Run one per table: a second one waits on the first one's row locks
    (`SELECT ... FOR UPDATE`), so rows of one partition key keep their order."""

    def __init__(
        self, engine: Engine, client: EventsClient, table: Table, *, batch_size: int = 100, poll_interval: float = 1.0
    ) -> None:
        if client.spool is not None:
            # A spooled publish is not accepted yet; deleting its row would trade the database's durability
            # for a local file's.
            raise ValueError("give the forwarder a client without spool_path: the outbox table is the spool")
        self.engine = engine
        self.client = client
        self.table = table
        self.batch_size = batch_size
        self.poll_interval = poll_interval

    def run_once(self) -> ForwardReport:
        """Send one batch. The rows stay locked (and undeleted) until the batch's transaction commits: a
        crash before that sends them again, under the same keys, which the API answers as replays."""
        t = self.table
        sent = rejected = 0
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(t).where(t.c.rejected_at.is_(None)).order_by(t.c.id).limit(self.batch_size).with_for_update()
            ).all()
            for row in rows:
                try:
                    self.client.publish(
                        row.event_type,
                        row.payload,
                        partition_key=row.partition_key,
                        idempotency_key=row.idempotency_key,
                        schema_version=row.schema_version,
                        headers=row.headers,
                        occurred_at=row.occurred_at,
                    )
                except EventsApiError as error:
                    marks: dict[str, Any] = {"attempts": t.c.attempts + 1, "last_error": str(error)[:2000]}
                    if error.retriable:
                        log.warning("events API unavailable, forwarding paused: %s", error)
                        conn.execute(update(t).where(t.c.id == row.id).values(**marks))
                        return ForwardReport(sent, rejected, stalled=True)
                    log.error("event %s refused by the events API: %s", row.idempotency_key, error)
                    conn.execute(update(t).where(t.c.id == row.id).values(**marks, rejected_at=func.now()))
                    rejected += 1
                    continue
                conn.execute(delete(t).where(t.c.id == row.id))
                sent += 1
        return ForwardReport(sent, rejected, stalled=False)

    def run(self, stop: threading.Event | None = None) -> None:
        """Forward until `stop` is set: batch after batch while rows wait, then every `poll_interval`."""
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                report = self.run_once()
            except OperationalError:  # the database blinked: the rows are still there, try again
                log.warning("outbox forwarder lost its database connection; retrying", exc_info=True)
                report = ForwardReport(0, 0, stalled=True)
            if report.stalled or report.sent + report.rejected < self.batch_size:
                stop.wait(self.poll_interval)
