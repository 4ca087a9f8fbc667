"""`events-api`: serve, relay, migrate, dev, openapi. Configuration errors end with one line, exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from events_api.admin_cli import add_commands
from events_api.settings import Settings, SettingsError


def uvicorn_options() -> dict[str, Any]:
    """How `serve` runs uvicorn; the benchmark's naive baseline uses the same, so the ratio compares our code."""
    from events_api.http.protocol import GuardedHttpProtocol

    return {
        "factory": True,
        "access_log": False,
        "log_level": "info",
        "proxy_headers": False,
        "http": GuardedHttpProtocol,
        "log_config": None,  # events_api.logs owns logging, the supervisor's lines included
    }


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from events_api.logs import setup_logging

    settings.require("database_url", "admin_token")
    setup_logging(fmt=settings.log_format)
    uvicorn.run(
        "events_api.http.app:app_from_environment",
        host=args.host,
        port=args.port,
        workers=args.workers,
        **uvicorn_options(),
    )
    return 0


def _migrate(_: argparse.Namespace, settings: Settings) -> int:
    from events_api.storage.migrate import migrate

    created = migrate(
        settings.sqlalchemy_url, now=datetime.now(UTC), partitions_ahead_days=settings.partitions_ahead_days
    )
    print(f"database is up to date; created {len(created)} outbox partition(s)")
    return 0


def _openapi(_: argparse.Namespace, settings: Settings) -> int:
    import yaml

    from events_api.http.app import build_services, create_app
    from events_api.http.openapi import openapi_document

    # Building the document needs no database: the engine is created lazily and never connects.
    offline = Settings(database_url="postgresql://localhost/openapi", admin_token="unused")  # noqa: S106
    app = create_app(services=build_services(offline))
    sys.stdout.write(yaml.safe_dump(openapi_document(app), sort_keys=False, allow_unicode=True, width=120))
    return 0


def _dev(args: argparse.Namespace, settings: Settings) -> int:
    from events_api.dev import run_dev

    return run_dev(args.data_dir, args.port, settings)


def _relay(args: argparse.Namespace, settings: Settings) -> int:
    import signal

    # A stop signal during start-up (before the loop's handlers exist) still means a clean exit.
    early: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: early.append(number))

    import asyncio

    from events_api.logs import setup_logging
    from relay.relay import Relay

    settings.require("database_url", "kafka_bootstrap_servers")
    setup_logging(fmt=settings.log_format)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)  # finish the batch in hand, settle it, release the lanes
        if early:
            stop.set()
        await Relay(settings, metrics_port=args.metrics_port, metrics_host=args.metrics_host).run(stop)

    asyncio.run(run())
    return 0


def _schemas_push(args: argparse.Namespace, _: Settings) -> int:
    import os
    from pathlib import Path

    from events_api.schemas_push import EXIT_ERROR, push

    api_key = args.api_key or os.environ.get("EVENTS_API_KEY")
    if not api_key:
        print("events-api schemas push: pass --api-key or set EVENTS_API_KEY", file=sys.stderr)
        return EXIT_ERROR
    return push(Path(args.directory), args.url, api_key, check_only=args.check)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="events-api", description="Events API: an HTTP outbox in front of Kafka.")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(run=_serve)

    commands.add_parser("migrate", help="bring the database schema up to date (idempotent)").set_defaults(run=_migrate)
    commands.add_parser("openapi", help="print the OpenAPI document").set_defaults(run=_openapi)
    schemas = commands.add_parser("schemas", help="schemas as code").add_subparsers(dest="action", required=True)
    push = schemas.add_parser("push", help="register every DIR/<event_type>.json; exit 1 on an incompatible one")
    push.add_argument("directory", metavar="DIR")
    push.add_argument("--url", default="http://127.0.0.1:8000", help="the API (default %(default)s)")
    push.add_argument("--api-key", help="a key with schemas:write (default: $EVENTS_API_KEY)")
    push.add_argument("--check", action="store_true", help="only check compatibility; register nothing")
    push.set_defaults(run=_schemas_push)

    relay = commands.add_parser("relay", help="forward the outbox to Kafka (several may run)")
    relay.add_argument(
        "--metrics-port", type=int, help="serve this relay's own Prometheus metrics on this port (default: off)"
    )
    relay.add_argument("--metrics-host", default="0.0.0.0", help="address for --metrics-port (default %(default)s)")
    relay.set_defaults(run=_relay)
    dev = commands.add_parser(
        "dev", help="everything on one machine: embedded PostgreSQL and Kafka broker, the API and a relay"
    )
    dev.add_argument("--data-dir", help="keep the database, admin token and key here between runs")
    dev.add_argument("--port", type=int, default=8000, help="the API's port (default %(default)s)")
    dev.set_defaults(run=_dev)
    add_commands(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        result: int = args.run(args, settings)
    except SettingsError as exc:
        print(f"events-api: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return result
