"""The in-service outbox helper against real PostgreSQL (the service's own database, made per test) and
the real server: staged events commit with the business change or not at all, and a forwarder
SIGKILLed mid-batch neither loses nor doubles an event."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from events_api_client import Event, EventsClient
from events_api_client.outbox import Forwarder, ForwardReport, outbox_table, stage
from sqlalchemy import Column, Engine, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.orm import Session

from tests.conftest import free_port
from tests.sdk.conftest import FAST, Tenant, create_tenant, order, stored_events
from tests.sdk.flaky_front import Act, flaky_front

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = os.environ.get("EVENTS_API_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def service_db() -> Iterator[str]:
    """An empty database standing for the producing service's own (not the Events API's)."""
    name = f"sdk_service_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def engine(service_db: str) -> Iterator[Engine]:
    engine = create_engine(service_db)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def tables(engine: Engine) -> tuple[Table, Table]:
    """The service's business table and its outbox, created the way a service would (`create_all`)."""
    metadata = MetaData()
    orders = Table("orders", metadata, Column("id", String(50), primary_key=True))
    outbox = outbox_table(metadata)
    metadata.create_all(engine)
    return orders, outbox


def staged_keys(engine: Engine, outbox: Table) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(select(outbox.c.idempotency_key).order_by(outbox.c.id)))


def test_a_staged_event_commits_with_the_business_change_or_not_at_all(
    engine: Engine, tables: tuple[Table, Table]
) -> None:
    orders, outbox = tables
    with Session(engine) as session, session.begin():
        session.execute(insert(orders).values(id="o-1"))
        key = stage(session, Event("order.created", order(1), partition_key="c-1"), table=outbox)

    def failing_change() -> None:
        with Session(engine) as session, session.begin():
            session.execute(insert(orders).values(id="o-2"))
            stage(session, Event("order.created", order(2)), table=outbox)
            raise RuntimeError("the business change failed")

    with pytest.raises(RuntimeError):
        failing_change()

    with engine.connect() as conn:
        assert list(conn.scalars(select(orders.c.id))) == ["o-1"]
    assert staged_keys(engine, outbox) == [key]
    assert key.startswith("outbox-")


def test_the_forwarder_sends_each_row_once_and_sets_refused_ones_aside(
    server: str, api_tenant: Tenant, engine: Engine, tables: tuple[Table, Table], sql: psycopg.Connection[Any]
) -> None:
    _, outbox = tables
    with Session(engine) as session, session.begin():
        good = [stage(session, Event("order.created", order(n), partition_key="c-1"), table=outbox) for n in (1, 2)]
        bad = stage(session, Event("order.created", order(3, amount="x")), table=outbox)
        good.append(stage(session, Event("order.created", order(4)), table=outbox))

    with EventsClient(server, api_tenant.key, retry=FAST) as client:
        forwarder = Forwarder(engine, client, outbox)
        assert forwarder.run_once() == ForwardReport(sent=3, rejected=1, stalled=False)
        assert forwarder.run_once() == ForwardReport(0, 0, stalled=False)  # the refused row is not retried
        found = [client.find_event(key) for key in good]
        assert all(f is not None for f in found)
        assert client.find_event(bad) is None
    assert staged_keys(engine, outbox) == [bad]
    with engine.connect() as conn:
        row = conn.execute(select(outbox)).one()
    assert row.rejected_at is not None
    assert row.last_error.startswith("422")
    assert stored_events(sql, api_tenant.id) == 3


def test_the_forwarder_pauses_while_the_api_is_down_and_keeps_the_rows(
    engine: Engine, tables: tuple[Table, Table]
) -> None:
    _, outbox = tables
    with Session(engine) as session, session.begin():
        key = stage(session, Event("order.created", order(1)), table=outbox)
    with EventsClient(f"http://127.0.0.1:{free_port()}", "evk_x_y", retry=FAST) as client:
        assert Forwarder(engine, client, outbox).run_once() == ForwardReport(0, 0, stalled=True)
    assert staged_keys(engine, outbox) == [key]
    with engine.connect() as conn:
        row = conn.execute(select(outbox)).one()
    assert (row.attempts, row.rejected_at) == (1, None)
    assert "could not be reached" in row.last_error


def test_a_forwarder_with_a_spool_is_refused(
    server: str, engine: Engine, tables: tuple[Table, Table], tmp_path: Path
) -> None:
    with (
        EventsClient(server, "evk_x_y", spool_path=tmp_path / "s.db", flush_interval=None) as client,
        pytest.raises(ValueError, match="spool"),
    ):
        Forwarder(engine, client, tables[1])


def test_a_forwarder_killed_mid_batch_loses_and_doubles_nothing(
    server: str, service_db: str, engine: Engine, tables: tuple[Table, Table], sql: psycopg.Connection[Any]
) -> None:
    """The forwarder (its own process) goes through a front that holds the answer to its 75th publish: the
    event is stored, the first batch of 50 rows is committed (deleted), 25 rows of the second batch are
    accepted but not deleted. Then SIGKILL, and a new forwarder finishes the job."""
    tenant = create_tenant(server)
    _, outbox = tables
    rows, batch, held = 120, 50, 75
    with Session(engine) as session, session.begin():
        keys = [
            stage(session, Event("order.created", order(n), partition_key=f"c-{n % 7}"), table=outbox)
            for n in range(rows)
        ]

    with flaky_front(server, *[Act.FORWARD] * (held - 1), Act.FORWARD_THEN_STALL, stall=60) as front:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.sdk.forwarder_process", service_db, front.url, tenant.key, str(batch)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while len(front.seen) < held or stored_events(sql, tenant.id) < held:
                assert process.poll() is None, "the forwarder exited"
                assert time.monotonic() < deadline, "the forwarder made no progress"
                time.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.kill()
            process.wait()
    assert len(front.seen) == held

    remaining = staged_keys(engine, outbox)
    assert remaining == keys[batch:]  # the first batch's deletes were committed, the second's were not
    with EventsClient(server, tenant.key, retry=FAST) as client:
        accepted_but_staged = [key for key in remaining if client.find_event(key) is not None]
        assert accepted_but_staged == keys[batch:held]

        forwarder = Forwarder(engine, client, outbox, batch_size=batch)
        while forwarder.run_once().sent:
            pass
        assert staged_keys(engine, outbox) == []
        assert all(len(client.check_landed(key).events) == 1 for key in keys)
    assert stored_events(sql, tenant.id) == rows
