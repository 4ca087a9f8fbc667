"""The bench's surroundings: a throw-away database, server processes, and a provisioned tenant."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.prefix) / "bin"


class BenchError(Exception):
    """The bench could not set itself up; the message says what and where to look."""


# --------------------------------------------------------------------------------------------- database


@dataclass(slots=True)
class BenchDatabase:
    """A database created for this run on the local PostgreSQL and dropped at the end."""

    admin_url: str  # a URL of an existing database (e.g. `postgres`) used to create and drop it
    name: str

    @property
    def url(self) -> str:
        base, _, _ = self.admin_url.rpartition("/")
        return f"{base}/{self.name}"

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)

    def create(self) -> None:
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))

    def execute(self, statement: str) -> None:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(statement.encode())

    def checkpoint(self) -> None:
        """Flush dirty pages so one scenario's writes don't cost the next one a checkpoint mid-run."""
        self.execute("CHECKPOINT")

    def settings(self, *names: str) -> dict[str, str]:
        with self._admin() as conn:
            rows = conn.execute(
                "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)", [list(names)]
            ).fetchall()
            version = conn.execute("SHOW server_version").fetchone()
        found = {str(name): str(value) for name, value in rows}
        found["server_version"] = str(version[0]) if version else "?"
        return found


def migrate(database_url: str, log: Path) -> None:
    env = {**os.environ, "EVENTS_API_DATABASE_URL": database_url}
    with log.open("wb") as out:
        done = subprocess.run(
            [str(VENV_BIN / "events-api"), "migrate"], env=env, cwd=ROOT, stdout=out, stderr=out, check=False
        )
    if done.returncode != 0:
        raise BenchError(f"events-api migrate failed with exit {done.returncode}; see {log}")


# ---------------------------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_PROBLEM_LINE = re.compile(r"Traceback|\b(?:WARNING|ERROR|CRITICAL)\b|Exception|Error:")


@dataclass(slots=True)
class Server:
    """A server process (and its workers) in its own process group, its output in a log file."""

    name: str
    command: list[str]
    env: dict[str, str]
    port: int
    log: Path
    http: bool = True  # False: no HTTP port to probe (the relay); start() returns once it is spawned
    process: subprocess.Popen[bytes] | None = None
    findings: list[str] = field(default_factory=list)
    problem_lines: int = 0

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, ready_path: str = "/readyz", timeout: float = 60.0) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches the workers too
            )
        if not self.http:
            return  # the caller watches it (e.g. the outbox draining); `alive` says whether it still runs
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited with {self.process.returncode} at start; see {self.log}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                status, _ = request(self.host, self.port, "GET", ready_path, timeout=1.0)
                if status == 200:
                    time.sleep(1.0)  # with several workers one may be ready while another fails
                    if self.process.poll() is None:
                        return
            time.sleep(0.2)
        raise BenchError(f"{self.name} was not ready after {timeout:.0f}s; see {self.log}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it if it lingers, then read the log for trouble."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
        # Workers may outlive the supervisor briefly; make sure nothing of the group remains.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process = None
        self.scan_log()

    def scan_log(self) -> None:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        problems = [line for line in lines if _PROBLEM_LINE.search(line)]
        self.problem_lines = len(problems)
        seen: set[str] = set()
        self.findings = []
        for line in problems:
            key = re.sub(r"\d+", "N", line.strip())[:160]
            if key not in seen:
                seen.add(key)
                self.findings.append(line.strip()[:240])
            if len(self.findings) >= 5:
                break


def events_api_server(database_url: str, admin_token: str, log: Path, workers: int = 2) -> Server:
    port = free_port()
    env = {
        **os.environ,
        "EVENTS_API_DATABASE_URL": database_url,
        "EVENTS_API_ADMIN_TOKEN": admin_token,
    }
    command = [str(VENV_BIN / "events-api"), "serve", "--workers", str(workers), "--port", str(port)]
    return Server("events-api", command, env, port, log)


def naive_server(database_url: str, log: Path, workers: int = 2, pool_size: int = 32) -> Server:
    port = free_port()
    env = {**os.environ, "NAIVE_DATABASE_URL": database_url, "NAIVE_POOL_SIZE": str(pool_size)}
    command = [sys.executable, "-m", "bench.naive", "--workers", str(workers), "--port", str(port)]
    return Server("naive", command, env, port, log)


def relay_server(database_url: str, bootstrap_servers: str, log: Path, *, name: str = "relay") -> Server:
    """One `events-api relay` (no HTTP port: `http=False`)."""
    env = {
        **os.environ,
        "EVENTS_API_DATABASE_URL": database_url,
        "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": bootstrap_servers,
    }
    return Server(name, [str(VENV_BIN / "events-api"), "relay"], env, 0, log, http=False)


def naive_relay_server(
    database_url: str, bootstrap_servers: str, log: Path, seconds: float, *, name: str = "naive-relay"
) -> Server:
    """The seed-style relay (`bench.naive_relay`), which stops by itself after `seconds`."""
    env = {**os.environ, "NAIVE_DATABASE_URL": database_url, "NAIVE_BOOTSTRAP_SERVERS": bootstrap_servers}
    command = [sys.executable, "-m", "bench.naive_relay", "--seconds", f"{seconds:g}"]
    return Server(name, command, env, 0, log, http=False)


# ------------------------------------------------------------------------------------------ provisioning


def request(
    host: str,
    port: int,
    method: str,
    path: str,
    body: object | None = None,
    token: str | None = None,
    timeout: float = 10.0,
) -> tuple[int, Any]:
    """One plain HTTP request for set-up (not for load): (status, decoded JSON body or None)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        decoded = json.loads(raw) if raw else None
    except ValueError:
        decoded = raw.decode(errors="replace")
    return response.status, decoded


ORDER_CREATED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
    },
    "required": ["order_id", "amount"],
}


def provision(server: Server, admin_token: str, tenant: str = "bench") -> str:
    """Create the tenant, an API key and the `order.created` schema; return the key."""

    def call(method: str, path: str, body: object, token: str, expect: tuple[int, ...]) -> Any:
        status, answer = request(server.host, server.port, method, path, body, token)
        if status not in expect:
            raise BenchError(f"{method} {path} answered {status}: {answer}")
        return answer

    call("POST", "/v1/tenants", {"id": tenant}, admin_token, (201,))
    scopes = ["events:publish", "schemas:write", "events:read"]
    issued = call("POST", f"/v1/tenants/{tenant}/api-keys", {"scopes": scopes, "name": "bench"}, admin_token, (201,))
    key = str(issued["key"])
    call("POST", "/v1/schemas/order.created/versions", {"schema": ORDER_CREATED_SCHEMA}, key, (200, 201))
    return key
