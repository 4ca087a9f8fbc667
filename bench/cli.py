"""`python -m bench [--quick] [--scenario NAME ...]`: set up, run the scenarios, print and save the table."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench.context import Context, Timing
from bench.env import ROOT, BenchDatabase, BenchError, migrate
from bench.report import Row, load_average, machine, render, write
from bench.scenarios import SCENARIOS

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_SETTINGS = ("synchronous_commit", "shared_buffers", "max_connections", "wal_sync_method")
QUICK = Timing(warmup=2.0, duration=5.0, quiet_timeout=8.0)
FULL = Timing(warmup=5.0, duration=20.0, quiet_timeout=30.0)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="Benchmark the Events API.")
    p.add_argument(
        "--quick", action="store_true", help=f"{QUICK.duration:.0f}s windows instead of {FULL.duration:.0f}s"
    )
    p.add_argument(
        "--scenario",
        "-s",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable); default: all",
    )
    p.add_argument("--duration", type=float, help="measured seconds per load phase (overrides --quick)")
    p.add_argument("--warmup", type=float, help="warm-up seconds before each measured window")
    p.add_argument(
        "--admin-url",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_ADMIN_URL),
        help="an existing database to create/drop the bench database from (env BENCH_POSTGRES_URL)",
    )
    p.add_argument("--database", default="events_api_bench", help="name of the throw-away database")
    p.add_argument(
        "--growth-sizes",
        type=_sizes,
        help="outbox sizes for the growth scenario, comma-separated, the first the baseline "
        "(default 0,1000000,5000000; 0,100000,500000 with --quick)",
    )
    p.add_argument("--results-dir", type=Path, default=ROOT / "bench" / "results")
    return p


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of row counts: {text!r}") from None
    if len(sizes) < 2 or any(size < 0 for size in sizes):
        raise argparse.ArgumentTypeError("at least two sizes, none negative")
    return sizes


def _terminate(signum: int, _: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop servers and drop the db


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    base = QUICK if args.quick else FULL
    timing = Timing(
        warmup=base.warmup if args.warmup is None else args.warmup,
        duration=base.duration if args.duration is None else args.duration,
        quiet_timeout=base.quiet_timeout,
    )
    names = args.scenario or list(SCENARIOS)
    results_dir: Path = args.results_dir
    results_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)

    started = time.monotonic()
    db = BenchDatabase(args.admin_url, args.database)
    pg = db.settings(*PG_SETTINGS)
    mode = f"{'quick' if args.quick else 'full'} ({timing.warmup:g}s warm-up + {timing.duration:g}s measured per phase)"
    info = machine(pg, mode)
    failed = False
    ctx: Context | None = None
    rows: list[Row] = []
    goals: list[str] = []
    sections: list[list[str]] = []

    with contextlib.ExitStack() as stack:
        print(f"bench: creating database {args.database}", file=sys.stderr)
        db.create()
        stack.callback(db.drop)
        migrate(db.url, results_dir / "migrate.log")
        ctx = Context(
            quick=args.quick,
            timing=timing,
            db=db,
            admin_token=secrets.token_urlsafe(24),
            results_dir=results_dir,
            run_id=secrets.token_hex(4),
            growth_sizes=args.growth_sizes,
        )
        stack.callback(ctx.stop_servers)
        for name in names:
            print(f"bench: scenario {name}", file=sys.stderr)
            try:
                ctx.rows.extend(SCENARIOS[name](ctx))
            except (BenchError, OSError) as exc:
                failed = True
                traceback.print_exc()
                ctx.rows.append(Row(scenario=name, target="-", notes=[f"FAILED: {exc}"]))
        rows, goals, sections = ctx.rows, ctx.goals, ctx.sections

    server_notes = []
    for server in ctx.servers if ctx else []:
        server.scan_log()
        where = server.log.relative_to(ROOT) if server.log.is_relative_to(ROOT) else server.log
        if server.problem_lines:
            server_notes.append(f"- {server.name}: {server.problem_lines} warning/error line(s) in {where}, e.g.:")
            server_notes += [f"  - `{line}`" for line in server.findings]
        else:
            server_notes.append(f"- {server.name}: no warnings, errors or tracebacks ({where})")

    info = dataclasses.replace(info, load_end=load_average())
    text = render("Events API benchmark", info, rows, goals, server_notes, os.cpu_count() or 1, sections)
    path = write(results_dir, text, info, rows)
    print(text)
    print(
        f"bench: wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
        f"in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )
    return 1 if failed else 0
