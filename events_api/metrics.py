"""Prometheus metrics of the API (`GET /metrics`): what each worker counts, and what the database says.

Two sources, because they answer different questions:

- **Per process, counted on the hot path** (a few µs a request, no I/O): requests and their latency by route,
  method and status; events accepted per tenant; rate-limited and fail-open requests. `events-api serve
  --workers N` runs N processes behind one socket, and a scrape reaches one of them, so these use
  prometheus_client's multiprocess mode: every worker writes its values to memory-mapped files in one
  directory and the worker that answers a scrape sums them all. The directory is
  `$PROMETHEUS_MULTIPROC_DIR` when set; otherwise each worker of one `serve` run derives the same fresh one
  from its supervisor (pid and start time), and the directories of supervisors that are gone are removed.
  A single process (`--workers 1`, tests) keeps its values in memory.
- **The platform, read from the database at scrape time** (so every API instance reports the same, whichever
  relays or workers run): backlog, the age of the oldest pending event, dead letters, partitions, live relays
  and the lanes each holds, the relays' cumulative delivery counts (`relay_stats`), and readiness. One
  transaction under a statement timeout, cached for CACHE_SECONDS and shared by concurrent scrapes.

Label values are bounded: routes are path templates (`unmatched` for any unknown path), methods a fixed set,
tenants the first MAX_TENANT_LABELS seen by a process (the rest are counted as `other`). No label holds a
key, token, header value or payload.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events_api.errors import StorageUnavailable
from events_api.lanes import LANES
from events_api.storage.database import Database
from events_api.storage.migrate import head_revision, schema_is_current
from events_api.storage.relay import APPLICATION_NAME as RELAY_APPLICATION
from events_api.storage.status import PlatformGauges, StatusStore

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("events_api.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
CACHE_SECONDS = 2.0
QUERY_TIMEOUT_MS = 2000
MAX_TENANT_LABELS = 100
OTHER = "other"
UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WORKER_DIRS = "events-api-metrics"


# --- where the workers of one `serve` meet --------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (clock ticks since boot), so a recycled pid is not mistaken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _alive(name: str) -> bool:
    pid, _, started = name.partition("-")
    return pid.isdigit() and _start_time(int(pid)) == (started or None)


def worker_directories() -> Path:
    """Where `serve` runs keep their workers' metric files, one directory per run (per user: /tmp is shared)."""
    return Path(tempfile.gettempdir()) / f"{_WORKER_DIRS}-{os.getuid()}"


def prepare_worker_directory(base: Path | None = None) -> str | None:
    """Call first thing in a `serve` worker, before any metric exists: choose where its values live. Returns
    the directory (multiprocess mode), or None for a process that serves alone."""
    configured = os.environ.get(MULTIPROC_VARIABLE)
    if configured:
        Path(configured).mkdir(parents=True, exist_ok=True)
        return configured
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None  # `serve --workers 1` runs uvicorn in this very process
    root = base or worker_directories()
    root.mkdir(mode=0o700, exist_ok=True)
    for stale in root.iterdir():  # left by `serve` runs that ended: their supervisor is gone
        if not _alive(stale.name):
            shutil.rmtree(stale, ignore_errors=True)
    directory = root / f"{parent.pid}-{_start_time(parent.pid) or ''}".rstrip("-")
    directory.mkdir(mode=0o700, exist_ok=True)
    os.environ[MULTIPROC_VARIABLE] = str(directory)
    values = sys.modules.get("prometheus_client.values")
    if values is not None and values.ValueClass is values.MutexValue:
        # prometheus_client picks its storage when first imported: too late now, each worker counts alone.
        log.warning("metrics: prometheus_client was imported before the workers' directory was set")
    return str(directory)


# --- what each process counts ----------------------------------------------------------------------------


class ApiMetrics:
    """The API's per-process metrics. One per process (`api_metrics()`): prometheus_client keeps them global."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.multiprocess_dir = os.environ.get(MULTIPROC_VARIABLE) or None
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests: Histogram = Histogram(
            "http_request_duration_seconds",
            "HTTP requests by route template, method and status: latency in seconds (its _count counts them)",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.accepted: Counter = Counter(
            "events_accepted",
            f"Events committed to the outbox (202, not replays), per tenant (the first {MAX_TENANT_LABELS} "
            f"tenants a process sees; later ones as '{OTHER}')",
            ["tenant"],
            registry=self.registry,
        )
        self.rate_limited: Counter = Counter(
            "rate_limited_requests",
            "Ingest requests refused with 429 by the tenant's rate limit",
            registry=self.registry,
        )
        self.rate_limit_fail_open: Counter = Counter(
            "rate_limit_fail_open",
            "Ingest requests admitted without a rate-limit check because Redis was unavailable",
            registry=self.registry,
        )
        self._requests: dict[tuple[str, str, int], Any] = {}
        self._tenants: dict[str, Any] = {}

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        child = self._requests.get(key)
        if child is None:
            # Bounded: routes are templates, methods a fixed set, statuses three digits.
            child = self._requests[key] = self.requests.labels(route, method if method in METHODS else OTHER, status)
        child.observe(seconds)

    def count_accepted(self, tenant: str, events: int) -> None:
        child = self._tenants.get(tenant)
        if child is None:
            label = tenant if len(self._tenants) < MAX_TENANT_LABELS else OTHER
            child = self.accepted.labels(label)
            if label != OTHER:
                self._tenants[tenant] = child
        child.inc(events)

    def collect(self) -> Iterator[Metric]:
        """This process's metrics, or every worker's (summed) in multiprocess mode."""
        if self.multiprocess_dir is None:
            yield from self.registry.collect()
            return
        from prometheus_client.multiprocess import MultiProcessCollector

        yield from MultiProcessCollector(None, path=self.multiprocess_dir).collect()  # type: ignore[no-untyped-call]


_api_metrics: ApiMetrics | None = None


def api_metrics() -> ApiMetrics:
    global _api_metrics
    if _api_metrics is None:
        _api_metrics = ApiMetrics()
    return _api_metrics


# --- what the database says ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlatformSnapshot:
    ready: bool
    gauges: PlatformGauges | None  # None while the database is unreachable or behind this build's schema
    query_seconds: float


class PlatformMetrics:
    """The database's side of /metrics, refreshed at most every `cache_seconds` (one query for many scrapes)."""

    def __init__(
        self,
        db: Database,
        *,
        cache_seconds: float = CACHE_SECONDS,
        timeout_ms: int = QUERY_TIMEOUT_MS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.store = StatusStore(db)
        self.cache_seconds = cache_seconds
        self.timeout_ms = timeout_ms
        self.monotonic = monotonic
        self._snapshot: PlatformSnapshot | None = None
        self._taken_at = -float("inf")
        self._lock = asyncio.Lock()

    async def snapshot(self) -> PlatformSnapshot:
        async with self._lock:  # concurrent scrapes share one refresh
            if self._snapshot is None or self.monotonic() - self._taken_at >= self.cache_seconds:
                self._snapshot = await self._read()
                self._taken_at = self.monotonic()
            return self._snapshot

    async def _read(self) -> PlatformSnapshot:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_ms / 1000 + 1):
                revision, gauges = await self.store.platform_gauges(
                    timeout_ms=self.timeout_ms, serves=lambda revision: schema_is_current(revision, head_revision())
                )
            ready = schema_is_current(revision, head_revision())
        except (StorageUnavailable, TimeoutError):
            return PlatformSnapshot(False, None, time.perf_counter() - started)
        except Exception as exc:  # e.g. the statement timeout: report not-ready rather than fail the scrape
            log.warning("metrics: the database query failed (%s)", type(exc).__name__)
            return PlatformSnapshot(False, None, time.perf_counter() - started)
        return PlatformSnapshot(ready, gauges, time.perf_counter() - started)


def platform_families(snapshot: PlatformSnapshot) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    yield GaugeMetricFamily(
        "events_api_ready",
        "1 when the database is reachable and migrated (what /readyz checks), else 0",
        value=int(snapshot.ready),
    )
    yield GaugeMetricFamily(
        "events_api_metrics_query_seconds",
        "How long reading the platform metrics from the database took",
        value=snapshot.query_seconds,
    )
    gauges = snapshot.gauges
    if gauges is None:
        return
    yield GaugeMetricFamily("outbox_unpublished_events", "Events accepted and not yet published", value=gauges.pending)
    yield GaugeMetricFamily(
        "outbox_oldest_unpublished_age_seconds",
        "Age of the oldest event not yet published (0 when none is pending)",
        value=gauges.oldest_pending_age_seconds,
    )
    yield GaugeMetricFamily(
        "outbox_dead_letter_events", "Events in the dead letters (until redriven)", value=gauges.dead_letters
    )
    yield GaugeMetricFamily("outbox_partitions", "Daily partitions of the outbox", value=gauges.partitions)
    yield GaugeMetricFamily(
        "outbox_partitions_bytes",
        "Size on disk of the outbox partitions, indexes included",
        value=gauges.partition_bytes,
    )
    relays = [r for r in gauges.relays if r.application_name == RELAY_APPLICATION]
    yield GaugeMetricFamily("relay_instances", "Relays connected to the database", value=len(relays))
    owned = GaugeMetricFamily(
        "relay_lanes_owned",
        f"Lanes (of {LANES}) each relay holds; relay = its client address and database session pid",
        labels=["relay"],
    )
    for relay in relays:
        owned.add_metric([f"{relay.client_addr or 'local'}/{relay.pid}"], relay.lanes)
    yield owned
    yield GaugeMetricFamily(
        "relay_lanes_unowned", "Lanes no relay holds (their events wait)", value=LANES - sum(r.lanes for r in relays)
    )
    yield GaugeMetricFamily(
        "relay_maintenance_leaders",
        "Relays leading the periodic maintenance (1 normally; 0 when no relay runs)",
        value=sum(1 for r in gauges.relays if r.maintenance_leader),
    )
    yield CounterMetricFamily(
        "relay_published",
        "Events the relays published to Kafka (all relays, since the first ran)",
        value=gauges.published,
    )
    yield CounterMetricFamily(
        "relay_retries", "Delivery attempts that failed and were scheduled again (all relays)", value=gauges.retried
    )
    yield CounterMetricFamily(
        "relay_dead_lettered", "Events the relays moved to the dead letters (all relays)", value=gauges.dead_lettered
    )


def exposition(snapshot: PlatformSnapshot, metrics: ApiMetrics | None = None) -> bytes:
    """The text exposition of this API's metrics and the platform's."""
    from prometheus_client import CollectorRegistry, generate_latest

    process = metrics or api_metrics()

    class _Everything:
        def collect(self) -> Iterator[Metric]:
            yield from process.collect()
            yield from platform_families(snapshot)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything())
    return generate_latest(registry)
