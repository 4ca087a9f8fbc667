"""CPU accounting from /proc: who used the machine's cores during a measured window.

Groups are the process trees the bench started (a server and its uvicorn workers), every
`postgres` process, the bench process itself (the load generator), and the machine as a whole
(busy and iowait from /proc/stat); `other` is the busy time no group accounts for. Figures are
percentages of one core, so 200 % is both cores of a 2-core machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class _Proc:
    pid: int
    ppid: int
    comm: str
    ticks: int  # utime + stime


@dataclass(frozen=True, slots=True)
class Snapshot:
    processes: dict[int, _Proc]
    system_total: int
    system_idle: int
    system_iowait: int


def _read_proc(pid: int) -> _Proc | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm is in parentheses and may contain spaces; fields after it are space-separated.
    open_at, close_at = raw.index("("), raw.rindex(")")
    rest = raw[close_at + 2 :].split()
    return _Proc(pid=pid, ppid=int(rest[1]), comm=raw[open_at + 1 : close_at], ticks=int(rest[11]) + int(rest[12]))


def _all_processes() -> dict[int, _Proc]:
    found: dict[int, _Proc] = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and (proc := _read_proc(int(entry.name))) is not None:
            found[proc.pid] = proc
    return found


def descendants(root: int, processes: Mapping[int, _Proc]) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for proc in processes.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in tree:
            continue
        tree.add(pid)
        todo.extend(children.get(pid, ()))
    return tree & set(processes)


def take_snapshot() -> Snapshot:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user/nice]
    total = sum(fields[:8])
    return Snapshot(_all_processes(), system_total=total, system_idle=fields[3], system_iowait=fields[4])


Selector = Callable[[Mapping[int, _Proc]], Iterable[int]]


def tree_of(root_pid: int) -> Selector:
    return lambda processes: descendants(root_pid, processes)


def named(comm: str) -> Selector:
    return lambda processes: [p.pid for p in processes.values() if p.comm == comm]


def postgres_serving(database: str) -> Selector:
    """The postgres server's processes, less the client backends of other databases (a test suite
    running next to the bench has its own backends; they count as `other`)."""

    def select(processes: Mapping[int, _Proc]) -> list[int]:
        found = []
        for proc in processes.values():
            if proc.comm != "postgres":
                continue
            # "postgres: 15/main: <user> <database> <host>(<port>) <state>" for client backends.
            words = _cmdline(proc.pid).split(": ", 2)[-1].split()
            is_client = len(words) >= 3 and ("(" in words[2] or words[2] == "[local]")
            if not is_client or words[1] == database:
                found.append(proc.pid)
        return found

    return select


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class ProcessCpu:
    """Per-group CPU over a window, plus the machine's busy and iowait share."""

    def __init__(self, groups: Mapping[str, Selector]) -> None:
        self.groups = dict(groups)

    def snapshot(self) -> object:
        return take_snapshot()

    def usage(self, start: object, end: object, wall: float) -> dict[str, float]:
        """% of one core per group, `machine busy`, `iowait`, `other`, and `other: <command>` for the
        busiest processes outside the groups (those that used at least 5 %)."""
        assert isinstance(start, Snapshot)
        assert isinstance(end, Snapshot)
        result: dict[str, float] = {}
        grouped: set[int] = set()
        for name, select in self.groups.items():
            pids = set(select(end.processes))
            grouped |= pids
            result[name] = 100 * sum(_delta(start, end, pid) for pid in pids) / _TICK / wall
        total = end.system_total - start.system_total
        cores = os.cpu_count() or 1
        if total > 0:
            idle = end.system_idle - start.system_idle
            iowait = end.system_iowait - start.system_iowait
            result["machine busy"] = 100 * cores * (total - idle - iowait) / total
            result["iowait"] = 100 * cores * iowait / total
            # Everything else running on the machine: should be small.
            result["other"] = max(0.0, result["machine busy"] - sum(result[name] for name in self.groups))
        result["processes started"] = len(end.processes.keys() - start.processes.keys())
        result["processes exited"] = len(start.processes.keys() - end.processes.keys())
        outsiders = sorted(
            ((_delta(start, end, pid), pid) for pid in end.processes if pid not in grouped), reverse=True
        )
        for ticks, pid in outsiders[:3]:
            pct = 100 * ticks / _TICK / wall
            if pct >= 5:
                result[f"other: {_command(pid, end.processes[pid].comm)}"] = pct
        return result


def _delta(start: Snapshot, end: Snapshot, pid: int) -> int:
    before = start.processes.get(pid)
    return end.processes[pid].ticks - (before.ticks if before else 0)


def _command(pid: int, comm: str) -> str:
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    words = [Path(argv[0].decode(errors="replace")).name] + [a.decode(errors="replace") for a in argv[1:3]]
    return " ".join(w for w in words if w)[:60] or comm


def machine_busy(interval: float = 1.0) -> float:
    """The machine's busy CPU over `interval` seconds, % of one core."""
    start = take_snapshot()
    time.sleep(interval)
    end = take_snapshot()
    return ProcessCpu({}).usage(start, end, interval).get("machine busy", 0.0)


def wait_until_quiet(threshold: float, timeout: float) -> float:
    """Wait (up to `timeout` seconds) until the machine is nearly idle; the last busy % measured."""
    deadline = time.monotonic() + timeout
    busy = machine_busy()
    while busy > threshold and time.monotonic() < deadline:
        busy = machine_busy()
    return busy
