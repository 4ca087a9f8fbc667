"""Operator commands of `events-api`: maintenance, tenants, keys, dead letters, status (issue 6).

They talk to the database directly (`EVENTS_API_DATABASE_URL`, like `migrate`) through the same domain
services as the HTTP API (`Tenants`, `DeadLetters`), so the rules are the ones the API enforces. Output
is a table for people and, with `--json`, one JSON document for scripts. Exit codes: 0 done, 1 refused
(unknown tenant, taken id, another maintenance run in progress, database not migrated), 2 configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import msgspec
import psycopg
import sqlalchemy.exc
from rich.console import Console
from rich.table import Table

from events_api.dead_letters import MAX_PAGE, DeadLetters
from events_api.errors import NotFound, Problem, StorageUnavailable
from events_api.lanes import LANES
from events_api.maintenance import MaintenancePolicy, MaintenanceReport, maintain
from events_api.models import ApiKeyIn, DeadLetterOut, Scopes
from events_api.settings import Settings
from events_api.storage.database import Database
from events_api.storage.maintenance import MaintenanceStore
from events_api.storage.platform import PlatformStore
from events_api.storage.relay import APPLICATION_NAME as RELAY_APPLICATION
from events_api.storage.status import Backlog, RelaySession, StatusStore, TenantBacklog, TenantRow
from events_api.tenants import Tenants

SCOPES: tuple[str, ...] = get_args(Scopes)
RUN_LOCK_WAIT = timedelta(seconds=60)  # a run of the leader's is bounded well below this
NOT_MIGRATED = "the database is not migrated; run `events-api migrate` first"

Command = Callable[[argparse.Namespace, Settings], int]


class Refused(Exception):
    """The command cannot do what was asked; the message is one line for the operator (exit 1)."""


# --- wiring ------------------------------------------------------------------------------------------


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Add the operator sub-commands to the `events-api` parser."""
    maintain_cmd = commands.add_parser(
        "maintain", help="create partitions ahead, drop expired ones, prune expired idempotency keys (once)"
    )
    _json_flag(maintain_cmd).set_defaults(run=_command(_maintain))

    status = commands.add_parser("status", help="backlog, dead letters, relays and their lanes, per tenant")
    _json_flag(status).set_defaults(run=_command(_status))

    tenants = commands.add_parser("tenants", help="create and list tenants").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = tenants.add_parser("create", help="create a tenant")
    create.add_argument("tenant_id", metavar="ID")
    _json_flag(create).set_defaults(run=_command(_tenants_create))
    _json_flag(tenants.add_parser("list", help="every tenant and its API keys")).set_defaults(
        run=_command(_tenants_list)
    )

    keys = commands.add_parser("keys", help="create and revoke tenant API keys").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create_key = keys.add_parser("create", help="issue an API key (the key is printed once)")
    create_key.add_argument("tenant_id", metavar="TENANT")
    create_key.add_argument(
        "--scope",
        dest="scopes",
        action="extend",
        nargs="+",
        choices=SCOPES,
        required=True,
        metavar="SCOPE",
        help=f"one or more of {', '.join(SCOPES)}",
    )
    create_key.add_argument("--name", default="", help="what the key is for")
    create_key.add_argument("--expires-at", help="RFC 3339 time after which the key stops working")
    _json_flag(create_key).set_defaults(run=_command(_keys_create))
    revoke = keys.add_parser("revoke", help="revoke an API key (refused at once)")
    revoke.add_argument("tenant_id", metavar="TENANT")
    revoke.add_argument("key_id", metavar="KEY_ID")
    _json_flag(revoke).set_defaults(run=_command(_keys_revoke))

    letters = commands.add_parser("dead-letters", help="list and redrive a tenant's dead letters").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = letters.add_parser("list", help="a tenant's dead letters, oldest first")
    listing.add_argument("tenant_id", metavar="TENANT")
    listing.add_argument("--event-type")
    listing.add_argument("--limit", type=_positive, default=100, help="at most this many (default %(default)s)")
    _json_flag(listing).set_defaults(run=_command(_dead_letters_list))
    redrive = letters.add_parser("redrive", help="deliver dead letters again (one, or --all)")
    redrive.add_argument("tenant_id", metavar="TENANT")
    redrive.add_argument("event_id", metavar="EVENT_ID", nargs="?")
    redrive.add_argument("--all", action="store_true", help="every dead letter of the tenant (or of --event-type)")
    redrive.add_argument("--event-type", help="with --all: only this event type")
    _json_flag(redrive).set_defaults(run=_command(_dead_letters_redrive))


def _json_flag(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _command(body: Callable[[argparse.Namespace, Settings, Console], Coroutine[Any, Any, None]]) -> Command:
    """Run an async command body with the one error mapping: refusals are one line on stderr, exit 1.
    (SettingsError escapes to `events_api.cli.main`, which prints it and exits 2.)"""

    def run(args: argparse.Namespace, settings: Settings) -> int:
        settings.require("database_url")
        console = _console()
        try:
            asyncio.run(body(args, settings, console))
        except Refused as exc:
            print(f"events-api: {exc}", file=sys.stderr)
            return 1
        except StorageUnavailable:
            print("events-api: the database is unreachable", file=sys.stderr)
            return 1
        except Problem as exc:
            print(f"events-api: {exc.detail}", file=sys.stderr)
            return 1
        except (sqlalchemy.exc.ProgrammingError, psycopg.errors.UndefinedTable) as exc:
            if not isinstance(getattr(exc, "orig", exc), psycopg.errors.UndefinedTable):
                raise
            print(f"events-api: {NOT_MIGRATED}", file=sys.stderr)
            return 1
        except psycopg.OperationalError as exc:
            print(f"events-api: the database is unreachable ({str(exc).splitlines()[0]})", file=sys.stderr)
            return 1
        return 0

    return run


def _console() -> Console:
    # Not a terminal (a pipe, a log, a test): wide enough that ids and errors are never wrapped.
    interactive = sys.stdout.isatty()
    return Console(highlight=False, emoji=False, width=None if interactive else 200, soft_wrap=not interactive)


@asynccontextmanager
async def _database(settings: Settings) -> AsyncIterator[Database]:
    db = Database(settings.sqlalchemy_url, pool_size=2, application_name="events-api admin")
    try:
        yield db
    finally:
        await db.dispose()


def _print_json(console: Console, value: Any) -> None:
    console.file.write(msgspec.json.encode(value).decode() + "\n")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def cli_actor() -> str:
    """How the audit log names an operator at the command line: `cli:<OS user>`."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (e.g. some containers)
        return "cli"


# --- maintain ----------------------------------------------------------------------------------------


async def _maintain(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    store = MaintenanceStore(settings.psycopg_conninfo)
    await store.connect()
    try:
        if not await store.wait_run_lock(RUN_LOCK_WAIT):
            raise Refused("another maintenance run (a relay's) has been in progress for a minute; try again later")
        with console.status("maintenance: partitions…") as status:
            pruned = 0

            def progress(step: str, amount: int) -> None:
                nonlocal pruned
                if step == "keys":
                    pruned += amount
                    status.update(f"maintenance: {pruned:,} idempotency keys pruned so far…")

            policy = MaintenancePolicy.from_settings(settings)
            report = await maintain(store, policy, _utcnow(), progress=progress)
    finally:
        await store.close()
    if args.json:
        _print_json(console, report)
    else:
        render_maintenance(console, report)


def render_maintenance(console: Console, report: MaintenanceReport) -> None:
    if report.partitions:
        table = Table("partition", "day", "action", "reason", title="outbox partitions", title_justify="left")
        for outcome in report.partitions:
            table.add_row(outcome.name, outcome.day.isoformat(), outcome.action, outcome.reason)
        console.print(table)
    created, dropped = len(report.with_action("created")), len(report.with_action("dropped"))
    kept, deferred = len(report.with_action("kept")), len(report.with_action("deferred"))
    console.print(
        f"partitions: {created} created, {dropped} dropped, {kept} kept, {deferred} deferred, "
        f"{report.retained} within retention"
    )
    more = "" if report.keys_done else "; the time budget ran out, the next run continues"
    console.print(f"idempotency keys: {report.keys_pruned} expired pruned in {report.key_batches} batch(es){more}")


# --- status ------------------------------------------------------------------------------------------


class StatusReport(msgspec.Struct):
    now: datetime
    backlog: Backlog
    sessions: list[RelaySession]  # relay and maintenance sessions of this database
    tenants: list[TenantBacklog]


async def _status(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    async with _database(settings) as db:
        store = StatusStore(db)
        report = StatusReport(
            _utcnow(), await store.backlog(), await store.relay_sessions(), await store.tenant_backlogs()
        )
    if args.json:
        _print_json(console, report)
    else:
        render_status(console, report)


def human_age(seconds: float) -> str:
    """`45s`, `3m 12s`, `2h`, `4d 3h`: the largest unit and the next one."""
    left = max(0, int(seconds))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for index, (suffix, size) in enumerate(units):
        if left >= size or suffix == "s":
            text = f"{left // size}{suffix}"
            if index + 1 < len(units):
                next_suffix, next_size = units[index + 1]
                if (left % size) // next_size:
                    text += f" {(left % size) // next_size}{next_suffix}"
            return text
    raise AssertionError("unreachable")


def _age(now: datetime, then: datetime | None) -> str:
    return "—" if then is None else human_age((now - then).total_seconds())


def render_status(console: Console, report: StatusReport) -> None:
    now, backlog = report.now, report.backlog
    relays = [r for r in report.sessions if r.application_name == RELAY_APPLICATION]
    leader = next((r for r in report.sessions if r.maintenance_leader), None)
    owned = sum(r.lanes for r in relays)
    oldest = f", oldest {_age(now, backlog.oldest_pending)} old" if backlog.oldest_pending else ""
    console.print(f"outbox: {backlog.pending:,} pending{oldest}; {backlog.dead_letters:,} dead letter(s)")
    console.print(f"relays: {len(relays)} connected, {owned}/{LANES} lanes owned")
    if not relays:
        console.print("[bold red]no relay is connected: nothing is being delivered[/]")
    elif owned < LANES:
        console.print(f"[yellow]{LANES - owned} lane(s) have no owner (relays take them within seconds)[/]")
    if relays:
        table = Table("pid", "client", "up", "lanes", title="relays", title_justify="left")
        for relay in relays:
            table.add_row(str(relay.pid), relay.client_addr or "local", _age(now, relay.started_at), str(relay.lanes))
        console.print(table)
    if leader is None:
        console.print("maintenance leader: none")
    else:
        where = leader.client_addr or "local"
        console.print(f"maintenance leader: session {leader.pid} ({where}, up {_age(now, leader.started_at)})")
    if report.tenants:
        table = Table("tenant", "pending", "oldest pending", "dead letters", title="tenants", title_justify="left")
        for tenant in report.tenants:
            table.add_row(
                tenant.tenant_id, f"{tenant.pending:,}", _age(now, tenant.oldest_pending), f"{tenant.dead_letters:,}"
            )
        console.print(table)
    else:
        console.print("tenants: nothing pending, no dead letters")


# --- tenants and keys --------------------------------------------------------------------------------


async def _tenants_create(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    async with _database(settings) as db:
        tenant = await Tenants(db, settings.admin_token).create(args.tenant_id, _utcnow(), actor=cli_actor())
    if args.json:
        _print_json(console, tenant)
    else:
        console.print(f"created tenant {tenant.id}", markup=False)


async def _tenants_list(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    async with _database(settings) as db:
        rows: list[TenantRow] = await StatusStore(db).tenants(_utcnow())
    if args.json:
        _print_json(console, rows)
        return
    if not rows:
        console.print("no tenants yet (events-api tenants create ID)")
        return
    table = Table("tenant", "created", "live keys", "keys", title=f"{len(rows)} tenant(s)", title_justify="left")
    for row in rows:
        table.add_row(row.tenant_id, f"{row.created_at:%Y-%m-%d %H:%M}", str(row.live_keys), str(row.keys))
    console.print(table)


async def _keys_create(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    fields: dict[str, Any] = {"scopes": args.scopes, "name": args.name}
    if args.expires_at:
        fields["expires_at"] = args.expires_at
    try:
        request = msgspec.convert(fields, ApiKeyIn, strict=False)
    except msgspec.ValidationError as exc:
        raise Refused(f"invalid key: {exc}") from None
    async with _database(settings) as db:
        created = await Tenants(db, settings.admin_token).create_key(
            args.tenant_id, request, _utcnow(), actor=cli_actor()
        )
    if args.json:
        _print_json(console, created)
        return
    console.print(
        f"created API key {created.id} for tenant {created.tenant} (scopes: {', '.join(created.scopes)})", markup=False
    )
    console.print("the key is shown only this once:")
    console.print(created.key, markup=False, soft_wrap=True)


async def _keys_revoke(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    async with _database(settings) as db:
        await Tenants(db, settings.admin_token).revoke_key(args.tenant_id, args.key_id, _utcnow(), actor=cli_actor())
    if args.json:
        _print_json(console, {"tenant": args.tenant_id, "id": args.key_id, "revoked": True})
    else:
        console.print(f"revoked API key {args.key_id} of tenant {args.tenant_id}", markup=False)


# --- dead letters ------------------------------------------------------------------------------------


async def _require_tenant(db: Database, tenant_id: str) -> None:
    if not await PlatformStore(db).tenant_exists(tenant_id):
        raise NotFound(f"no tenant {tenant_id[:80]!r}")


async def _dead_letters_list(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    letters: list[DeadLetterOut] = []
    more = False
    async with _database(settings) as db:
        await _require_tenant(db, args.tenant_id)
        service, cursor = DeadLetters(db), None
        with console.status("reading dead letters…") as status:
            while len(letters) < args.limit:
                want = min(MAX_PAGE, args.limit - len(letters))
                page = await service.page(args.tenant_id, event_type=args.event_type, limit=want, cursor=cursor)
                letters += page.dead_letters
                status.update(f"reading dead letters… {len(letters):,}")
                cursor = page.next_cursor
                if cursor is None:
                    break
            more = cursor is not None
    if args.json:
        _print_json(console, {"tenant": args.tenant_id, "dead_letters": letters, "more": more})
        return
    render_dead_letters(console, args.tenant_id, letters, more)


def render_dead_letters(console: Console, tenant_id: str, letters: Sequence[DeadLetterOut], more: bool) -> None:
    if not letters:
        console.print(f"tenant {tenant_id} has no dead letters", markup=False)
        return
    table = Table(
        "event id",
        "event type",
        "key",
        "attempts",
        "dead-lettered",
        "last error",
        title=f"dead letters of {tenant_id}",
        title_justify="left",
    )
    for letter in letters:
        table.add_row(
            letter.event_id,
            letter.event_type,
            letter.partition_key or "",
            str(letter.attempts),
            f"{letter.dead_lettered_at:%Y-%m-%d %H:%M:%S}",
            letter.last_error[:200],
        )
    console.print(table)
    if more:
        console.print(f"showing the oldest {len(letters)}; there are more (raise --limit)")


async def _dead_letters_redrive(args: argparse.Namespace, settings: Settings, console: Console) -> None:
    if (args.event_id is None) == (not args.all):
        raise Refused("name one EVENT_ID, or pass --all (optionally with --event-type)")
    if args.event_type is not None and not args.all:
        raise Refused("--event-type goes with --all")
    async with _database(settings) as db:
        await _require_tenant(db, args.tenant_id)
        service = DeadLetters(db)
        with console.status("redriving…"):
            if args.all:
                count = await service.redrive_all(args.tenant_id, args.event_type, _utcnow(), actor=cli_actor())
            else:
                await service.redrive_one(args.tenant_id, args.event_id, _utcnow(), actor=cli_actor())
                count = 1
    if args.json:
        _print_json(console, {"tenant": args.tenant_id, "count": count})
    else:
        console.print(
            f"redrove {count} dead letter(s) of tenant {args.tenant_id}: they go to the end of their lanes",
            markup=False,
        )
