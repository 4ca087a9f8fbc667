"""What the relay scenarios share: a Tansu broker with its log in the results directory, waiting for a relay
to own its lanes, and CPU accounting for processes that are not load-tested over HTTP."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg

from bench.context import QUIET_PCT, Context, WindowSampler
from bench.env import BenchError, Server
from bench.procstat import ProcessCpu, Selector, postgres_serving, tree_of, wait_until_quiet
from bench.report import DISTURBED_PCT
from events_api.lanes import LANES
from events_api.storage.relay import LANE_LOCK_CLASS
from tests.support.kafka import Broker

_PROBLEM = re.compile(r"\b(?:ERROR|WARN|WARNING|panic|panicked)\b")


@contextlib.contextmanager
def broker(ctx: Context, name: str) -> Iterator[Broker]:
    """A fresh in-memory Tansu broker, its output in `bench/results/<name>.log`; stopped on exit."""
    log = ctx.log_path(name)
    log.unlink(missing_ok=True)
    kafka = Broker(log_dir=ctx.results_dir)
    kafka.log_path = log  # one file per scenario instead of the harness's shared `tansu.log`
    try:
        yield kafka.start()
    finally:
        kafka.close()


def broker_problems(kafka: Broker) -> list[str]:
    """Warning/error lines in the broker's log (at most 3, abridged)."""
    try:
        lines = kafka.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = [line.strip()[:200] for line in lines if _PROBLEM.search(line)]
    return found[:3] + ([f"... {len(found) - 3} more"] if len(found) > 3 else [])


def owned_lanes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objsubid = 2 AND granted",
        [LANE_LOCK_CLASS],
    ).fetchone()
    return int(row[0]) if row else 0


def wait_for_lanes(conn: psycopg.Connection[Any], relay: Server, timeout: float = 30.0) -> float:
    """Wait until the relays own every lane; the seconds it took."""
    started = time.monotonic()
    while owned_lanes(conn) < LANES:
        if not relay.alive:
            raise BenchError(f"{relay.name} exited at start; see {relay.log}")
        if time.monotonic() - started > timeout:
            raise BenchError(f"{relay.name} did not take the {LANES} lanes in {timeout:.0f}s; see {relay.log}")
        time.sleep(0.05)
    return time.monotonic() - started


def sampler(ctx: Context, conn: psycopg.Connection[Any], groups: Mapping[str, Selector]) -> WindowSampler:
    """CPU of `groups` plus PostgreSQL and the bench process ("load-gen"), and the bench database's xact/s."""
    me = os.getpid()
    all_groups: dict[str, Selector] = {
        **groups,
        "postgres": postgres_serving(ctx.db.name),
        "load-gen": lambda _: [me],
    }
    return WindowSampler(ProcessCpu(all_groups), conn)


def tree(server: Server | Broker) -> Selector:
    pid = server.pid
    if pid is None:
        raise BenchError("the process is not running")
    return tree_of(pid)


def quiet(ctx: Context, timeout: float | None = None) -> None:
    """CHECKPOINT, then wait (up to `timeout`, default the run's) for the machine to be nearly idle."""
    ctx.db.checkpoint()
    busy = wait_until_quiet(QUIET_PCT, ctx.timing.quiet_timeout if timeout is None else timeout)
    if busy > QUIET_PCT:
        print(f"bench: the machine is busy ({busy:.0f}% of a core) before the run; going on", file=sys.stderr)


def disturbed_note(cpu: Mapping[str, float]) -> str | None:
    other = cpu.get("other", 0.0)
    if other <= DISTURBED_PCT:
        return None
    culprits = [f"{name.removeprefix('other: ')} {pct:.0f}%" for name, pct in cpu.items() if name.startswith("other: ")]
    also = f" ({', '.join(culprits)})" if culprits else ""
    return f"DISTURBED: other processes used {other:.0f}% of a core during the run{also}"
