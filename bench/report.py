"""The results table: one row per (scenario, target), headed by the machine's figures."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.env import ROOT
from bench.loadgen import LoadResult

SERVER_GROUPS = ("api", "relay")  # the process under test, for the "server CPU" column
COUNTS = frozenset({"pg xact/s", "pg WAL kB/s", "processes started", "processes exited"})  # not percentages
DISTURBED_PCT = 25.0  # CPU used by processes outside the bench (% of one core) that makes a row suspect


@dataclass(slots=True)
class Row:
    scenario: str
    target: str
    events_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    errors: int | None = None
    loadgen_cpu_pct: float | None = None  # the bench process's user + system CPU seconds per wall second, in %
    notes: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # % of one core per process group in the window
    goal: str | None = None  # the goal in a few words ("baseline" for a reference row)
    goal_met: bool | None = None  # None: nothing to meet (a baseline)
    vs_naive: float | None = None  # events/s over the naive counterpart's

    @classmethod
    def from_load(cls, scenario: str, target: str, result: LoadResult, events_per_request: int = 1) -> Row:
        row = cls(
            scenario=scenario,
            target=target,
            events_per_s=result.requests_per_s * events_per_request,
            p50_ms=result.percentile_ms(50),
            p99_ms=result.percentile_ms(99),
            p999_ms=result.percentile_ms(99.9),
            errors=result.errors,
            loadgen_cpu_pct=result.loadgen_cpu_pct,
            cpu=dict(result.cpu),
        )
        if result.errors:
            row.notes.append(f"errors: {result.error_summary()}")
        if result.requests_per_s and "pg xact/s" in result.cpu:
            row.notes.append(f"≈{result.cpu['pg xact/s'] / result.requests_per_s:.1f} PG transactions/request")
        if result.requests_per_s and "pg WAL kB/s" in result.cpu:
            row.notes.append(f"≈{result.cpu['pg WAL kB/s'] / result.requests_per_s:.1f} kB WAL/request")
        other = result.cpu.get("other", 0.0)
        if other > DISTURBED_PCT:
            culprits = [f"{result.cpu.get('processes exited', 0):.0f} processes exited in the window"]
            culprits += [
                f"{name.removeprefix('other: ')} {pct:.0f}%"
                for name, pct in result.cpu.items()
                if name.startswith("other: ")
            ]
            also = f" ({', '.join(culprits)})"
            row.notes.append(f"DISTURBED: other processes used {other:.0f}% of a core during the run{also}")
        return row


@dataclass(frozen=True, slots=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gb: float
    postgres: str
    postgres_settings: dict[str, str]
    python: str
    date: str
    commit: str
    mode: str
    load_start: str  # /proc/loadavg's 1, 5 and 15 minute figures
    load_end: str = "-"

    def lines(self) -> list[str]:
        pg = ", ".join(f"{k}={v}" for k, v in self.postgres_settings.items())
        return [
            f"- Date: {self.date}",
            f"- CPUs: {self.cpus} x {self.cpu_model}; memory {self.memory_gb:.0f} GB",
            f"- PostgreSQL {self.postgres} ({pg})",
            f"- Python {self.python}; {platform.system()} {platform.release()}",
            f"- Commit: {self.commit}; mode: {self.mode}",
            f"- Load average (1 / 5 / 15 min): {self.load_start} at the start, {self.load_end} at the end",
        ]


def load_average() -> str:
    try:
        one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    except (OSError, ValueError):
        return "?"
    return f"{one} / {five} / {fifteen}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    commit = done.stdout.strip() or "unknown"
    return f"{commit} (+ uncommitted changes)" if status.stdout.strip() else commit


def machine(pg_settings: dict[str, str], mode: str) -> Machine:
    settings = dict(pg_settings)
    version = settings.pop("server_version", "?")
    return Machine(
        cpus=os.cpu_count() or 1,
        cpu_model=_cpu_model(),
        memory_gb=_memory_gb(),
        postgres=version,
        postgres_settings=settings,
        python=platform.python_version(),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        commit=_commit(),
        mode=mode,
        load_start=load_average(),
    )


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _goal(row: Row) -> str:
    if row.goal is None:
        return "-"
    if row.goal_met is None:
        return row.goal
    return f"{row.goal}: {'met' if row.goal_met else '**NOT met**'}"


def _server_cpu(row: Row) -> str:
    for name in SERVER_GROUPS:
        if name in row.cpu:
            return f"{row.cpu[name]:.0f}%"
    return "-"


def _cpu_line(row: Row) -> str:
    order = ["api", "postgres", "load-gen", "other", "machine busy", "iowait"]
    names = [n for n in order if n in row.cpu] + [n for n in row.cpu if n not in order]
    parts = [f"{name} {row.cpu[name]:,.0f}" if name in COUNTS else f"{name} {row.cpu[name]:.0f}%" for name in names]
    return f"- {row.scenario} / {row.target}: " + ", ".join(parts)


COLUMNS = (
    "Columns: events/s counts accepted events only; x naive = events/s over the naive handler's (ingest) or the "
    "naive relay's (relay); p50 / p99 / p99.9 = latency of the accepted requests (growth claim rows: claim time, "
    "p50 and max); load-gen CPU = the bench process's user + system CPU seconds per wall second in the measured "
    "window (the load generator; the pending-count poller for relay rows); server CPU = the process under test "
    "(api: the server and its workers; relay: the relay process, or the bench process running the claims), "
    "both as % of one core."
)


def render(
    title: str,
    machine_info: Machine,
    rows: list[Row],
    goals: list[str],
    server_notes: list[str],
    cores: int,
    sections: list[list[str]] | None = None,
) -> str:
    out = [f"# {title}", "", *machine_info.lines(), ""]
    out.append(
        "| scenario | target | events/s | x naive | p50 ms | p99 ms | p99.9 ms | errors | load-gen CPU | server CPU "
        "| goal | notes |"
    )
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for row in rows:
        errors = "-" if row.errors is None else str(row.errors)
        cpu = "-" if row.loadgen_cpu_pct is None else f"{row.loadgen_cpu_pct:.0f}%"
        ratio = "-" if row.vs_naive is None else f"{row.vs_naive:.2f}x"
        notes = "; ".join(row.notes).replace("|", "\\|")
        goal = _goal(row).replace("|", "\\|")
        out.append(
            f"| {row.scenario} | {row.target} | {_num(row.events_per_s, 0)} | {ratio} | {_num(row.p50_ms)} | "
            f"{_num(row.p99_ms)} | {_num(row.p999_ms)} | {errors} | {cpu} | {_server_cpu(row)} | "
            f"{goal} | {notes} |"
        )
    out += ["", COLUMNS]
    if goals:
        out += ["", "Goals:", *goals]
    for section in sections or []:
        out += ["", *section]
    cpu_rows = [row for row in rows if row.cpu]
    if cpu_rows:
        out += [
            "",
            f"CPU in the measured window, % of one core ({cores} cores = {100 * cores}%; "
            "api = the server and its workers, postgres = PostgreSQL's processes less other databases' backends, "
            "load-gen = the bench process, other = the rest of the busy time; pg xact/s = transactions "
            "committed in the bench database; pg WAL kB/s = WAL the whole PostgreSQL server wrote):",
            *[_cpu_line(row) for row in cpu_rows],
        ]
    if server_notes:
        out += ["", "Server logs:", *server_notes]
    return "\n".join(out) + "\n"


def write(results_dir: Path, text: str, machine_info: Machine, rows: list[Row]) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "latest.md"
    path.write_text(text)
    data = {"machine": asdict(machine_info), "rows": [asdict(row) for row in rows]}
    (results_dir / "latest.json").write_text(json.dumps(data, indent=2) + "\n")
    return path
