"""CPU accounting from /proc: who used the machine's cores during a measured window.

Groups are the process trees the bench started (a server and its uvicorn workers), every
`postgres` process, the bench process itself (the load generator), and the machine as a whole
(busy and iowait from /proc/stat). Figures are percentages of one core, so 200 % is both cores
of a 2-core machine.
"""

from __future__ import annotations

import os
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
    with open("/proc/stat") as f:  # noqa: PTH123 - one small read
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, already counted in user/nice]
    total = sum(fields[:8])
    return Snapshot(_all_processes(), system_total=total, system_idle=fields[3], system_iowait=fields[4])


Selector = Callable[[Mapping[int, _Proc]], Iterable[int]]


def tree_of(root_pid: int) -> Selector:
    return lambda processes: descendants(root_pid, processes)


def named(comm: str) -> Selector:
    return lambda processes: [p.pid for p in processes.values() if p.comm == comm]


class ProcessCpu:
    """Per-group CPU over a window, plus the machine's busy and iowait share."""

    def __init__(self, groups: Mapping[str, Selector]) -> None:
        self.groups = dict(groups)

    def snapshot(self) -> object:
        return take_snapshot()

    def usage(self, start: object, end: object, wall: float) -> dict[str, float]:
        assert isinstance(start, Snapshot)
        assert isinstance(end, Snapshot)
        result: dict[str, float] = {}
        for name, select in self.groups.items():
            ticks = 0
            for pid in select(end.processes):
                before = start.processes.get(pid)
                ticks += end.processes[pid].ticks - (before.ticks if before else 0)
            result[name] = 100 * ticks / _TICK / wall
        total = end.system_total - start.system_total
        cores = os.cpu_count() or 1
        if total > 0:
            idle = end.system_idle - start.system_idle
            iowait = end.system_iowait - start.system_iowait
            result["machine busy"] = 100 * cores * (total - idle - iowait) / total
            result["iowait"] = 100 * cores * iowait / total
        return result
