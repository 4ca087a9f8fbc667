"""What every scenario gets: timings, the database, the running API with a tenant key, and helpers."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.env import BenchDatabase, Server, events_api_server, provision
from bench.loadgen import LoadResult, LoadSpec, RequestFactory, run_load
from bench.procstat import ProcessCpu, postgres_serving, tree_of, wait_until_quiet
from bench.report import DISTURBED_PCT, Row

QUIET_PCT = 25.0  # machine busy below this (% of one core) counts as quiet


@dataclass(frozen=True, slots=True)
class Timing:
    warmup: float
    duration: float
    quiet_timeout: float  # how long to wait for other processes to calm down before a load phase


@dataclass(slots=True)
class Context:
    quick: bool
    timing: Timing
    db: BenchDatabase
    admin_token: str
    results_dir: Path
    run_id: str
    servers: list[Server] = field(default_factory=list)  # every server started, for the log report
    rows: list[Row] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)
    sections: list[list[str]] = field(default_factory=list)  # Markdown blocks printed under the goals
    growth_sizes: tuple[int, ...] | None = None  # outbox sizes for `growth` (None: its defaults)
    api_key: str = ""
    _api: Server | None = None

    def events_api(self) -> Server:
        """The Events API (2 workers) with tenant `bench`, its key in `api_key`; started on first use."""
        if self._api is None:
            server = events_api_server(self.db.url, self.admin_token, self.log_path("events-api-server"))
            self._api = self.start(server)
            self.api_key = provision(server, self.admin_token)
        return self._api

    def stop_servers(self) -> None:
        for server in self.servers:
            server.stop()

    def key_prefix(self, label: str) -> str:
        """An Idempotency-Key prefix unique to this run and load phase."""
        return f"bench-{self.run_id}-{label}"

    def log_path(self, name: str) -> Path:
        return self.results_dir / f"{name}.log"

    def start(self, server: Server) -> Server:
        self.servers.append(server)
        server.start()
        return server

    def load(
        self,
        server: Server,
        connections: int,
        make_request: RequestFactory,
        *,
        expect_status: int = 202,
    ) -> LoadResult:
        """Checkpoint, wait for a quiet machine, then run one warm-up + measured window against
        `server`, with CPU accounting. A window disturbed by other processes is run once more."""
        self.db.checkpoint()
        me = os.getpid()
        cpu = ProcessCpu(
            {"api": tree_of(server.pid), "postgres": postgres_serving(self.db.name), "load-gen": lambda _: [me]}
        )
        first_seq = 1
        for attempt in (1, 2):
            busy = wait_until_quiet(QUIET_PCT, self.timing.quiet_timeout)
            if busy > QUIET_PCT:
                print(f"bench: the machine is busy ({busy:.0f}% of a core) before the run; going on", file=sys.stderr)
            spec = LoadSpec(
                host=server.host,
                port=server.port,
                connections=connections,
                duration=self.timing.duration,
                warmup=self.timing.warmup,
                make_request=make_request,
                expect_status=expect_status,
                first_seq=first_seq,  # a retry goes on with new idempotency keys
            )
            with psycopg.connect(self.db.url, autocommit=True) as conn:
                result = run_load(spec, WindowSampler(cpu, conn))
            other = result.cpu.get("other", 0.0)
            if other <= DISTURBED_PCT or attempt == 2:
                break
            print(f"bench: other processes used {other:.0f}% of a core in the window; once more", file=sys.stderr)
            first_seq = result.next_seq
        return result


class WindowSampler:
    """CPU per process group (`ProcessCpu`) plus the bench database's transaction counter, as
    `pg xact/s` (autocommit statements count one each; PostgreSQL flushes these counters about
    once a second per backend, so over a few seconds the rate is approximate), and the WAL written,
    as `pg WAL kB/s` (the whole server's: other databases' writes count too)."""

    def __init__(self, cpu: ProcessCpu, conn: psycopg.Connection[Any]) -> None:
        self.cpu = cpu
        self.conn = conn

    def _counters(self) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT xact_commit + xact_rollback, pg_current_wal_lsn() - '0/0'::pg_lsn "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def snapshot(self) -> object:
        return self.cpu.snapshot(), *self._counters()

    def usage(self, start: object, end: object, wall: float) -> dict[str, float]:
        assert isinstance(start, tuple)
        assert isinstance(end, tuple)
        result = self.cpu.usage(start[0], end[0], wall)
        result["pg xact/s"] = (end[1] - start[1]) / wall
        result["pg WAL kB/s"] = (end[2] - start[2]) / 1024 / wall
        return result
