"""An open-loop sender: single-event requests at a fixed rate, each recording when its 202 arrived.

Request n is due at `start + n / rate`, whether or not earlier ones were answered (open loop: a slow
server gets more requests in flight, it does not slow the sender down). Requests go over a fixed pool
of keep-alive connections (asyncio streams on uvloop, one request in flight per connection); a request
that finds no idle connection waits for one and is counted as late. For every request it keeps the
status, the wall-clock time (`time.time()`) the whole response was read, the `event_id` of a 202
body, and the latency from when it was due.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import resource
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench.loadgen import CpuSampler, RequestFactory

LATE_S = 0.005  # sent this much after it was due: late (no idle connection, or the loop was busy)


@dataclass(slots=True)
class OpenLoopResult:
    rate: float
    warmup_requests: int  # requests [warmup_requests, warmup_requests + window_requests) are the window
    window_requests: int
    window_s: float
    status: list[int]  # per request; 0 = no answer (connection error, or unanswered at the end)
    accepted_at: list[float]  # wall clock when the response was complete
    event_ids: list[str | None]
    latency_s: list[float]  # from due to response
    late: int = 0  # window requests sent more than LATE_S after they were due
    loadgen_cpu_pct: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)

    def window(self) -> range:
        return range(self.warmup_requests, self.warmup_requests + self.window_requests)

    def window_latencies_ms(self, status: int = 202) -> list[float]:
        return sorted(self.latency_s[i] * 1000 for i in self.window() if self.status[i] == status)


def percentile(sorted_values: list[float], pct: float) -> float | None:
    """Nearest rank."""
    if not sorted_values:
        return None
    return sorted_values[max(1, math.ceil(pct / 100 * len(sorted_values))) - 1]


class _Sender:
    def __init__(self, host: str, port: int, make_request: RequestFactory, total: int, connections: int) -> None:
        self.host, self.port = host, port
        self.make_request = make_request
        self.connections = connections
        self.status = [0] * total
        self.accepted_at = [0.0] * total
        self.event_ids: list[str | None] = [None] * total
        self.latency_s = [0.0] * total
        self.late = 0
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def open(self) -> None:
        for _ in range(self.connections):
            self.idle.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def close(self) -> None:
        while not self.idle.empty():
            _, writer = self.idle.get_nowait()
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def send(self, n: int, due: float, counted: bool) -> None:
        reader, writer = await self.idle.get()
        if counted and time.perf_counter() - due > LATE_S:
            self.late += 1
        try:
            writer.write(self.make_request(n))
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            at = head.lower().find(b"\r\ncontent-length:")
            if at < 0:
                raise ValueError("response without Content-Length")
            end = head.find(b"\r\n", at + 2)
            body = await reader.readexactly(int(head[at + 17 : end]))
        except (OSError, ValueError, asyncio.IncompleteReadError):
            writer.close()
            self.idle.put_nowait(await asyncio.open_connection(self.host, self.port))
            return
        done = time.perf_counter()
        self.accepted_at[n] = time.time()
        self.latency_s[n] = done - due
        self.status[n] = status
        self.idle.put_nowait((reader, writer))
        if status == 202:
            self.event_ids[n] = str(json.loads(body)["event_id"])


async def _run(
    host: str,
    port: int,
    make_request: RequestFactory,
    rate: float,
    warmup: float,
    duration: float,
    connections: int,
    sampler: CpuSampler | None,
) -> OpenLoopResult:
    warm, window = round(rate * warmup), round(rate * duration)
    total = warm + window
    sender = _Sender(host, port, make_request, total, connections)
    await sender.open()
    tasks: set[asyncio.Task[None]] = set()
    cpu_start: object = None
    cpu_end: object = None
    usage_start = usage_end = resource.getrusage(resource.RUSAGE_SELF)
    window_start = window_end = 0.0
    start = time.perf_counter() + 0.05
    try:
        for n in range(total + 1):
            due = start + n / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if n == warm:  # the window starts with request `warm` and ends when request `total` would be due
                window_start = time.perf_counter()
                usage_start = resource.getrusage(resource.RUSAGE_SELF)
                cpu_start = await asyncio.to_thread(sampler.snapshot) if sampler else None
            if n == total:
                window_end = time.perf_counter()
                usage_end = resource.getrusage(resource.RUSAGE_SELF)
                cpu_end = await asyncio.to_thread(sampler.snapshot) if sampler else None
                break
            task = asyncio.create_task(sender.send(n, due, n >= warm))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=10.0)  # unanswered ones keep status 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sender.close()
    wall = window_end - window_start
    used = (usage_end.ru_utime - usage_start.ru_utime) + (usage_end.ru_stime - usage_start.ru_stime)
    return OpenLoopResult(
        rate=rate,
        warmup_requests=warm,
        window_requests=window,
        window_s=wall,
        status=sender.status,
        accepted_at=sender.accepted_at,
        event_ids=sender.event_ids,
        latency_s=sender.latency_s,
        late=sender.late,
        loadgen_cpu_pct=100 * used / wall if wall > 0 else 0.0,
        cpu=sampler.usage(cpu_start, cpu_end, wall) if sampler else {},
    )


def _run_loop(main: Coroutine[Any, Any, OpenLoopResult]) -> OpenLoopResult:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run_open_loop(
    host: str,
    port: int,
    make_request: RequestFactory,
    *,
    rate: float,
    warmup: float,
    duration: float,
    connections: int = 16,
    sampler: CpuSampler | None = None,
) -> OpenLoopResult:
    """Send `rate` requests/s for `warmup + duration` seconds; see the module docstring."""
    return _run_loop(_run(host, port, make_request, rate, warmup, duration, connections, sampler))
