"""The operator commands (`events-api tenants | keys | dead-letters | status`) run for real against a
database of their own, through `events_api.cli.main` as the console script calls it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from events_api.admin_cli import human_age
from events_api.cli import main
from events_api.http.app import build_services, create_app
from events_api.lanes import LANES
from events_api.maintenance import MaintenanceLoop, MaintenancePolicy
from events_api.settings import Settings
from events_api.storage.relay import RelayStore, Settlement
from tests.conftest import ADMIN_TOKEN, TenantFixture, fresh_database, new_tenant
from tests.support.asgi import running

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
NOW = datetime.now(UTC)


@dataclass
class Result:
    code: int
    out: str
    err: str


Cli = Callable[..., Awaitable[Result]]


@pytest.fixture
def db() -> Iterator[str]:
    with fresh_database("events_api_admin") as url:
        yield url


@pytest.fixture
def cli(db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`events-api ARGS…` with EVENTS_API_DATABASE_URL set to this test's database (and nothing else)."""
    for name in list(os.environ):
        if name.startswith("EVENTS_API_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("EVENTS_API_DATABASE_URL", db)

    async def run(*argv: str) -> Result:
        capsys.readouterr()
        try:
            code = await asyncio.to_thread(main, list(argv))  # it runs its own event loop, as from a shell
        except SystemExit as exc:  # argparse refusing the arguments
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@asynccontextmanager
async def api(url: str, at: datetime = NOW) -> AsyncIterator[httpx.AsyncClient]:
    services = build_services(Settings(database_url=url, admin_token=ADMIN_TOKEN), clock=lambda: at)
    async with running(create_app(services=services)) as http:
        yield http


async def tenant_with_events(url: str, types: dict[str, int], at: datetime = NOW) -> tuple[TenantFixture, list[str]]:
    """A tenant, its schemas, and `types[t]` events of each type (received `at`); their ids in order."""
    ids: list[str] = []
    async with api(url, at) as http:
        tenant = await new_tenant(http)
        for event_type, count in types.items():
            registered = await http.post(
                f"/v1/schemas/{event_type}/versions", json={"schema": SCHEMA}, headers=tenant.auth
            )
            assert registered.status_code == 201, registered.text
            for n in range(count):
                response = await http.post(
                    "/v1/events",
                    json={"event_type": event_type, "payload": {"n": n}, "partition_key": "k"},
                    headers={**tenant.auth, "Idempotency-Key": secrets.token_hex(8)},
                )
                assert response.status_code == 202, response.text
                ids.append(response.json()["event_id"])
    return tenant, ids


async def dead_letter(url: str, event_ids: set[str]) -> None:
    """Settle these pending events as the relay does for undeliverable ones."""
    store = RelayStore(Settings(database_url=url).psycopg_conninfo)
    await store.connect()
    try:
        lanes = await store.take_lanes(range(LANES), LANES)
        batch = await store.claim(sorted(lanes), NOW, limit=1000, per_lane=256)
        doomed = [
            Settlement(e, "dead", topic="t", error="MSG_SIZE_TOO_LARGE: boom") for e in batch if e.event_id in event_ids
        ]
        assert len(doomed) == len(event_ids)
        await store.settle(doomed, NOW)
    finally:
        await store.close()


def table_rows(out: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]


def scalar(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def test_ages_read_as_people_say_them() -> None:
    assert [human_age(s) for s in (0, 45, 192, 3600, 7500, 363_600, 90_061)] == [
        "0s",
        "45s",
        "3m 12s",
        "1h",
        "2h 5m",
        "4d 5h",
        "1d 1h",
    ]


async def test_tenants_create_and_list(cli: Cli) -> None:
    created = await cli("tenants", "create", "acme-shop")
    assert (created.code, created.out.strip(), created.err) == (0, "created tenant acme-shop", "")
    again = await cli("tenants", "create", "acme-shop")
    assert again.code == 1
    assert again.err == "events-api: tenant 'acme-shop' already exists\n"
    invalid = await cli("tenants", "create", "Not_A_Tenant")
    assert invalid.code == 1
    assert "tenant id must match" in invalid.err
    assert (await cli("tenants", "create", "beta-shop", "--json")).code == 0

    listing = await cli("tenants", "list")
    assert listing.code == 0
    assert [row[0] for row in table_rows(listing.out)] == ["acme-shop", "beta-shop"]
    as_json = json.loads((await cli("tenants", "list", "--json")).out)
    assert [(t["tenant_id"], t["live_keys"]) for t in as_json] == [("acme-shop", 0), ("beta-shop", 0)]


async def test_a_key_is_printed_once_works_and_is_refused_once_revoked(cli: Cli, db: str) -> None:
    assert (await cli("tenants", "create", "acme-keys")).code == 0
    created = await cli("keys", "create", "acme-keys", "--scope", "events:read", "schemas:write", "--name", "ci")
    assert created.code == 0, created.err
    lines = created.out.splitlines()
    key_id = lines[0].split()[3]
    assert lines[0] == f"created API key {key_id} for tenant acme-keys (scopes: events:read, schemas:write)"
    assert lines[1] == "the key is shown only this once:"
    key = lines[2]
    assert key.startswith("evk_")
    assert scalar(db, "SELECT name FROM api_keys WHERE id = %s", key_id) == "ci"
    assert key not in (await cli("tenants", "list")).out

    async with api(db, datetime.now(UTC)) as http:
        auth = {"Authorization": f"Bearer {key}"}
        assert (await http.get("/v1/schemas", headers=auth)).status_code == 200
        revoked = await cli("keys", "revoke", "acme-keys", key_id)
        assert (revoked.code, revoked.out.strip()) == (0, f"revoked API key {key_id} of tenant acme-keys")
        assert (await http.get("/v1/schemas", headers=auth)).status_code == 401

    unknown_scope = await cli("keys", "create", "acme-keys", "--scope", "events:everything")
    assert unknown_scope.code == 2
    assert "invalid choice: 'events:everything'" in unknown_scope.err
    no_tenant = await cli("keys", "create", "nobody-here", "--scope", "events:read")
    assert (no_tenant.code, no_tenant.err) == (1, "events-api: no tenant 'nobody-here'\n")
    past = await cli("keys", "create", "acme-keys", "--scope", "events:read", "--expires-at", "2001-01-01T00:00:00Z")
    assert (past.code, past.err) == (1, "events-api: expires_at is in the past\n")
    no_key = await cli("keys", "revoke", "acme-keys", "key_0000000000000000")
    assert no_key.code == 1
    assert "has no API key" in no_key.err
    as_json = json.loads((await cli("keys", "create", "acme-keys", "--scope", "events:publish", "--json")).out)
    assert as_json["key"].startswith("evk_")
    assert as_json["scopes"] == ["events:publish"]


async def test_dead_letters_are_listed_and_redriven(cli: Cli, db: str) -> None:
    tenant, ids = await tenant_with_events(db, {"order.created": 3, "order.shipped": 1})
    await dead_letter(db, set(ids))

    listing = await cli("dead-letters", "list", tenant.id)
    assert listing.code == 0, listing.err
    rows = table_rows(listing.out)
    assert [row[0] for row in rows] == sorted(ids)  # one settle: the same time, then by id
    assert {tuple(row[1:4]) for row in rows} == {("order.created", "k", "1"), ("order.shipped", "k", "1")}
    assert {row[5] for row in rows} == {"MSG_SIZE_TOO_LARGE: boom"}
    assert "there are more" not in listing.out
    shipped = json.loads((await cli("dead-letters", "list", tenant.id, "--event-type", "order.shipped", "--json")).out)
    assert [d["event_id"] for d in shipped["dead_letters"]] == [ids[3]]
    assert shipped["more"] is False
    first_two = await cli("dead-letters", "list", tenant.id, "--limit", "2")
    assert [row[0] for row in table_rows(first_two.out)] == sorted(ids)[:2]
    assert "showing the oldest 2; there are more (raise --limit)" in first_two.out

    one = await cli("dead-letters", "redrive", tenant.id, ids[0])
    assert (one.code, one.out.strip()) == (
        0,
        f"redrove 1 dead letter(s) of tenant {tenant.id}: they go to the end of their lanes",
    )
    assert scalar(db, "SELECT state FROM outbox WHERE event_id = %s", ids[0]) == "pending"
    by_type = await cli("dead-letters", "redrive", tenant.id, "--all", "--event-type", "order.created", "--json")
    assert json.loads(by_type.out) == {"tenant": tenant.id, "count": 2}
    assert scalar(db, "SELECT array_agg(event_id) FROM dead_letters") == [ids[3]]

    again = await cli("dead-letters", "redrive", tenant.id, ids[0])
    assert (again.code, again.err) == (1, f"events-api: no dead letter {ids[0]!r}\n")
    neither = await cli("dead-letters", "redrive", tenant.id)
    assert (neither.code, neither.err) == (
        1,
        "events-api: name one EVENT_ID, or pass --all (optionally with --event-type)\n",
    )
    both = await cli("dead-letters", "redrive", tenant.id, ids[3], "--all")
    assert both.code == 1
    stranger = await cli("dead-letters", "list", "nobody-here")
    assert (stranger.code, stranger.err) == (1, "events-api: no tenant 'nobody-here'\n")
    empty = await cli("dead-letters", "list", (await new_tenant_id(cli)))
    assert "has no dead letters" in empty.out


async def new_tenant_id(cli: Cli) -> str:
    tenant_id = "t-" + secrets.token_hex(4)
    assert (await cli("tenants", "create", tenant_id)).code == 0
    return tenant_id


async def test_status_shows_the_backlog_the_relays_lanes_and_each_tenant(cli: Cli, db: str) -> None:
    idle = await cli("status")
    assert idle.code == 0
    assert "no relay is connected: nothing is being delivered" in idle.out

    tenant, ids = await tenant_with_events(db, {"order.created": 3}, at=NOW - timedelta(hours=1))
    await dead_letter(db, {ids[0]})
    relay = RelayStore(Settings(database_url=db).psycopg_conninfo)
    maintainer = MaintenanceLoop(Settings(database_url=db).psycopg_conninfo, MaintenancePolicy(timedelta(days=7), 3))
    await relay.connect()
    try:
        assert len(await relay.take_lanes(range(LANES), 10)) == 10
        assert await maintainer.tick() is not None

        report = json.loads((await cli("status", "--json")).out)
        assert report["backlog"]["pending"] == 2
        assert report["backlog"]["dead_letters"] == 1
        sessions = {s["application_name"]: s for s in report["sessions"]}
        assert sessions["events-api relay"]["lanes"] == 10
        assert sessions["events-api maintenance"]["maintenance_leader"] is True
        assert [(t["tenant_id"], t["pending"], t["dead_letters"]) for t in report["tenants"]] == [(tenant.id, 2, 1)]

        shown = await cli("status")
        assert shown.code == 0
        assert "outbox: 2 pending, oldest 1h" in shown.out
        assert f"relays: 1 connected, 10/{LANES} lanes owned" in shown.out
        assert f"{LANES - 10} lane(s) have no owner" in shown.out
        assert "maintenance leader: session" in shown.out
        tenant_row = next(row for row in table_rows(shown.out) if row[0] == tenant.id)
        assert tenant_row[1] == "2"
        assert tenant_row[2].startswith("1h")
        assert tenant_row[3] == "1"
    finally:
        await relay.close()
        await maintainer.store.close()


async def test_configuration_errors_are_one_line_and_exit_2(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVENTS_API_DATABASE_URL")
    for command in (["status"], ["maintain"], ["tenants", "list"], ["dead-letters", "list", "acme"]):
        missing = await cli(*command)
        assert (missing.code, missing.out) == (2, "")
        assert missing.err == "events-api: configuration error: EVENTS_API_DATABASE_URL is required but not set\n"
    monkeypatch.setenv("EVENTS_API_DATABASE_URL", "mysql://localhost/events")
    malformed = await cli("status")
    assert malformed.code == 2
    assert malformed.err.count("\n") == 1
    assert malformed.err.startswith("events-api: configuration error: EVENTS_API_DATABASE_URL: ")


async def test_an_unmigrated_or_unreachable_database_is_one_line(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, db: str
) -> None:
    empty = f"events_api_empty_{secrets.token_hex(3)}"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        monkeypatch.setenv("EVENTS_API_DATABASE_URL", db.rsplit("/", 1)[0] + "/" + empty)
        for command in (["status"], ["maintain"], ["tenants", "list"]):
            result = await cli(*command)
            assert (result.code, result.err) == (
                1,
                "events-api: the database is not migrated; run `events-api migrate` first\n",
            )
    finally:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{empty}" WITH (FORCE)')
    monkeypatch.setenv("EVENTS_API_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/nowhere")
    for command in (["status"], ["maintain"]):
        result = await cli(*command)
        assert result.code == 1
        assert result.err.startswith("events-api: the database is unreachable")
        assert result.err.count("\n") == 1
