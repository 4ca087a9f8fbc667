"""A small closed-loop HTTP/1.1 keep-alive load generator on asyncio (uvloop when available).

It shares the machine with the server and PostgreSQL, so it is built to be cheap: one
`asyncio.Protocol` per connection, request bytes built by the caller from precomputed templates
(`make_request(n)` varies only ids and keys), a minimal response parser that only looks at the
status code and the body framing, and latencies kept in a plain list until the run is over.

Each connection has exactly one request in flight (no pipelining): it sends the next request as
soon as the previous response is complete. Requests completing during the warm-up are not
counted; the measured window starts after the warm-up and lasts `duration` seconds. Only responses
that complete inside the window are counted, so throughput is (completed in window) / window.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import resource
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

RequestFactory = Callable[[int], bytes]


class CpuSampler(Protocol):
    """Something that can snapshot CPU counters at the window's edges (see `bench.procstat`)."""

    def snapshot(self) -> object: ...

    def usage(self, start: object, end: object, wall: float) -> dict[str, float]: ...


@dataclass(frozen=True, slots=True)
class LoadSpec:
    host: str
    port: int
    connections: int
    duration: float
    warmup: float
    make_request: RequestFactory
    expect_status: int = 202
    first_seq: int = 1
    drain_timeout: float = 10.0


@dataclass(slots=True)
class LoadResult:
    window_s: float
    completed: int
    ok: int
    statuses: dict[int, int]
    transport_errors: int
    latencies_s: list[float]  # of the `ok` responses, sorted
    loadgen_cpu_pct: float  # of one core
    cpu: dict[str, float] = field(default_factory=dict)  # % of one core per process group (sampler)
    next_seq: int = 0

    @property
    def errors(self) -> int:
        return self.completed - self.ok + self.transport_errors

    @property
    def requests_per_s(self) -> float:
        return self.ok / self.window_s if self.window_s > 0 else 0.0

    def percentile_ms(self, pct: float) -> float | None:
        """Nearest-rank percentile of the successful responses' latency, in milliseconds."""
        if not self.latencies_s:
            return None
        rank = max(1, math.ceil(pct / 100 * len(self.latencies_s)))
        return self.latencies_s[rank - 1] * 1000

    def error_summary(self) -> str:
        parts = [f"{status}x{count}" for status, count in sorted(self.statuses.items()) if status != 0]
        if self.transport_errors:
            parts.append(f"connx{self.transport_errors}")
        return ", ".join(parts)


class _Run:
    """State shared by all connections of one run."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.seq = spec.first_seq
        self.window_start = math.inf
        self.window_end = math.inf
        self.stopping = False
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.transport_errors = 0

    def next_request(self) -> bytes:
        n = self.seq
        self.seq += 1
        return self.spec.make_request(n)

    def record(self, status: int, started: float, ended: float) -> None:
        if ended < self.window_start or ended > self.window_end:
            return
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status == self.spec.expect_status:
            self.latencies.append(ended - started)

    def record_transport_error(self) -> None:
        now = time.perf_counter()
        if self.window_start <= now <= self.window_end:
            self.transport_errors += 1


def _parse_response(buf: bytearray) -> tuple[int, int] | None:
    """(status, total length) once a whole response is in `buf`; None while more bytes are needed."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = bytes(buf[:head_end]).lower()
    status = int(head[9:12])
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        eol = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : eol if eol >= 0 else len(head)])
        total = head_end + 4 + length
        return (status, total) if len(buf) >= total else None
    if b"\r\ntransfer-encoding: chunked" in head:
        last = buf.find(b"\r\n0\r\n\r\n", head_end + 2)
        return (status, last + 7) if last >= 0 else None
    if status in (204, 304) or 100 <= status < 200:
        return status, head_end + 4
    raise ValueError(f"response without length framing: {head[:200]!r}")


class _Connection(asyncio.Protocol):
    def __init__(self, run: _Run, closed: asyncio.Future[bool]) -> None:
        self.run = run
        self.closed = closed
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.started = 0.0
        self.in_flight = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports don't subclass it
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        if self.run.stopping:
            self.in_flight = False
            self.transport.close()
            return
        request = self.run.next_request()
        self.in_flight = True
        self.started = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            parsed = _parse_response(self.buf)
        except ValueError:
            self.run.record_transport_error()
            self.in_flight = False
            assert self.transport is not None
            self.transport.close()
            return
        if parsed is None:
            return
        status, total = parsed
        self.run.record(status, self.started, time.perf_counter())
        del self.buf[:total]
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        # True when the server dropped us mid-request (counted as an error; the caller reconnects).
        if self.in_flight:
            self.run.record_transport_error()
        if not self.closed.done():
            self.closed.set_result(self.in_flight or not self.run.stopping)


async def _connection_loop(run: _Run) -> None:
    loop = asyncio.get_running_loop()
    while not run.stopping:
        closed: asyncio.Future[bool] = loop.create_future()
        try:
            await loop.create_connection(functools.partial(_Connection, run, closed), run.spec.host, run.spec.port)
        except OSError:
            run.record_transport_error()
            await asyncio.sleep(0.1)
            continue
        if not await closed:
            return
        await asyncio.sleep(0.01)  # dropped by the server: reconnect


async def _run(spec: LoadSpec, sampler: CpuSampler | None) -> LoadResult:
    run = _Run(spec)
    tasks = [asyncio.create_task(_connection_loop(run)) for _ in range(spec.connections)]
    try:
        await asyncio.sleep(spec.warmup)
        cpu_start = sampler.snapshot() if sampler else None
        usage_start = resource.getrusage(resource.RUSAGE_SELF)
        run.window_start = time.perf_counter()
        await asyncio.sleep(spec.duration)
        run.window_end = time.perf_counter()
        usage_end = resource.getrusage(resource.RUSAGE_SELF)
        cpu_end = sampler.snapshot() if sampler else None
        run.stopping = True
        window = run.window_end - run.window_start
        _, pending = await asyncio.wait(tasks, timeout=spec.drain_timeout)
        run.transport_errors += len(pending)  # connections still waiting for an answer
    finally:
        run.stopping = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    used = (usage_end.ru_utime - usage_start.ru_utime) + (usage_end.ru_stime - usage_start.ru_stime)
    cpu = sampler.usage(cpu_start, cpu_end, window) if sampler else {}
    run.latencies.sort()
    return LoadResult(
        window_s=window,
        completed=sum(run.statuses.values()),
        ok=run.statuses.get(spec.expect_status, 0),
        statuses=run.statuses,
        transport_errors=run.transport_errors,
        latencies_s=run.latencies,
        loadgen_cpu_pct=100 * used / window,
        cpu=cpu,
        next_seq=run.seq,
    )


def _run_loop(main: Coroutine[Any, Any, LoadResult]) -> LoadResult:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def run_load(spec: LoadSpec, sampler: CpuSampler | None = None) -> LoadResult:
    """Drive `spec` to completion and return what was measured in its window."""
    gc.collect()
    gc.freeze()
    try:
        return _run_loop(_run(spec, sampler))
    finally:
        with contextlib.suppress(Exception):
            gc.unfreeze()
