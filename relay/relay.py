"""The relay loop: own lanes, claim due events in sequence order, produce them, settle the batch.

    ┌─────────────┐ claim (per lane, by seq) ┌──────────┐ delivery reports ┌────────────────────────┐
    │ pending     │ ───────────────────────▶ │ produce  │ ───────────────▶ │ settle in 1 statement  │
    └─────────────┘ ◀── retry: backoff ───── └──────────┘                  │ published / retry /    │
                                                                            │ dead letter (moved)    │
                                                                            └────────────────────────┘

Delivery is at least once: a relay that dies between producing and settling leaves its events
pending, and whoever owns the lane next publishes them again (consumers deduplicate by `ce_id`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from events_api.logs import fields
from events_api.maintenance import MaintenanceLoop, MaintenancePolicy, MaintenanceReport
from events_api.routing import Routing
from events_api.settings import Settings, SettingsError
from events_api.storage.relay import ClaimedEvent, RelayStore, Settlement
from events_api.tracing import tracing
from relay import metrics as relay_metrics
from relay.lanes import plan
from relay.metrics import RelayMetrics
from relay.publisher import Delivered, Failed, KafkaPublisher
from relay.records import KafkaRecord, dead_letter_record, held_back, record_for
from relay.retry import gives_up, is_permanent, next_attempt

log = logging.getLogger("relay")

MIN_PER_LANE = 16
MAX_PER_LANE = 256  # deeper reads into one hot lane cost more in the claim than they gain
IDLE_WAIT_SECONDS = 0.5  # poll fallback when no NOTIFY arrives
REBALANCE_SECONDS = 1.0
RECONNECT_SECONDS = 1.0
PROGRESS_LOG_SECONDS = 10.0  # clean batches are summed into one line this often; failing ones get a line each


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Progress:
    since: float
    batches: int = 0
    events: int = 0
    published: int = 0

    def add(self, events: int, published: int) -> None:
        self.batches += 1
        self.events += events
        self.published += published


class Relay:
    def __init__(
        self,
        settings: Settings,
        *,
        producer_overrides: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] = _utcnow,
        rand: Callable[[], float] = random.random,
        metrics_port: int | None = None,
        metrics_host: str = "0.0.0.0",
    ) -> None:
        self.metrics = RelayMetrics()
        self.tracing = tracing("events-api-relay")
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.store = RelayStore(settings.psycopg_conninfo)
        # Partitions ahead, expiry, key pruning: every relay runs the loop, only the elected leader works.
        self.maintenance = MaintenanceLoop(
            settings.psycopg_conninfo, MaintenancePolicy.from_settings(settings), clock=clock, observe=self._maintained
        )
        self.publisher = KafkaPublisher(
            settings.kafka_cluster_servers(),
            producer_overrides,
            on_replaced=lambda cluster: self.metrics.producers_replaced.labels(cluster).inc(),
        )
        self.batch_size = settings.relay_batch_size
        self.clock = clock
        self.rand = rand
        self.owned: set[int] = set()
        # How deep to read into each lane per claim: an even share of the batch to start with, doubled
        # while some lane fills its share (a hot key), halved again when none does.
        self.per_lane = MIN_PER_LANE
        # Observable by tests and (later) metrics.
        self.published = 0
        self.dead_lettered = 0
        self.retried = 0
        self._progress = _Progress(time.monotonic())

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` is set: serve, and after a lost database connect again. Returns after a graceful stop."""
        server = None
        if self.metrics_port is not None:
            try:
                server = relay_metrics.serve(self.metrics, self.metrics_port, self.metrics_host)
            except OSError as exc:
                raise SettingsError(f"the relay's metrics port {self.metrics_port}: {exc.strerror or exc}") from None
            log.info("relay metrics on http://%s:%d/metrics", self.metrics_host, server.server_port)
        maintenance = asyncio.create_task(self.maintenance.run(stop))
        try:
            while not stop.is_set():
                try:
                    await self.store.connect()
                    log.info("relay connected; taking lanes")
                    await self._serve(stop)
                except Exception as exc:
                    # Nothing unsettled is lost: the lanes go with the session and the relay starts over.
                    if isinstance(exc, psycopg.OperationalError):
                        log.warning("database unavailable (%s); lanes released, retrying", type(exc).__name__)
                    else:  # e.g. a read-only database after a failover, or one not migrated yet
                        log.exception("relay failed; lanes released, starting over")
                    self.owned.clear()
                    self.metrics.lanes.set(0)
                    self.metrics.reconnects.inc()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), RECONNECT_SECONDS)
                finally:
                    await self.store.close()  # closing the session releases every lane lock
        finally:
            if not stop.is_set():
                maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await maintenance
            self.publisher.close()
            if self.tracing is not None:
                self.tracing.shutdown()
            if server is not None:
                server.shutdown()
                server.server_close()
            self.metrics.lanes.set(0)
            log.info(
                "relay stopped (published %d, retried %d, dead-lettered %d)",
                *self._counts(),
                extra=fields(
                    event="relay_stopped", published=self.published, retried=self.retried, dead=self.dead_lettered
                ),
            )

    def _counts(self) -> tuple[int, int, int]:
        return self.published, self.retried, self.dead_lettered

    async def _serve(self, stop: asyncio.Event) -> None:
        rebalanced = -REBALANCE_SECONDS
        while not stop.is_set():
            if time.monotonic() - rebalanced >= REBALANCE_SECONDS:
                await self._rebalance()
                rebalanced = time.monotonic()
            started = time.perf_counter()
            batch = await self.store.claim(
                sorted(self.owned), self.clock(), limit=self.batch_size, per_lane=self.per_lane
            )
            self._adapt_depth(batch)
            if not batch:
                self._log_progress()
                await self.store.wait_for_events(IDLE_WAIT_SECONDS)
                continue
            claimed = time.perf_counter()
            if self.tracing is None:
                settlements = await self._deliver(batch)
            else:
                with self.tracing.batch_span(len(batch), [e.traceparent for e in batch]):
                    settlements = await self._deliver(batch)
            delivered = time.perf_counter()
            now = self.clock()
            published, retried, dead = await self.store.settle(settlements, now)
            self._observe(batch, settlements, (claimed - started, delivered - claimed, time.perf_counter() - delivered))
            self.published += published
            self.retried += retried
            self.dead_lettered += dead
            self.metrics.settled(published, retried, dead)
            lag = (now - min(e.received_at for e in batch)).total_seconds()
            self.metrics.delivery_lag.observe(max(0.0, lag))
            if retried or dead:
                errors = Counter(s.error.split(":", 1)[0] for s in settlements if s.error)
                log.info(
                    "batch of %d: %d published, %d to retry, %d dead-lettered (%s)",
                    len(batch),
                    published,
                    retried,
                    dead,
                    ", ".join(f"{name} x{count}" for name, count in errors.most_common()),
                    extra=fields(
                        event="relay_batch",
                        events=len(batch),
                        published=published,
                        retried=retried,
                        dead_lettered=dead,
                        errors=dict(errors),
                        lanes=len(self.owned),
                        duration_ms=round((time.perf_counter() - started) * 1000, 1),
                    ),
                )
            else:
                self._progress.add(len(batch), published)
            self._log_progress()

    def _observe(self, batch: list[ClaimedEvent], settlements: list[Settlement], steps: tuple[float, ...]) -> None:
        self.metrics.batch_size.observe(len(batch))
        for step, seconds in zip(("claim", "publish", "settle"), steps, strict=True):
            self.metrics.step_seconds.labels(step).observe(seconds)
        failures = [s.error.split(":", 1)[0] for s in settlements if s.outcome != "published" and s.error]
        if failures:
            self.metrics.failed_records(failures)

    def _log_progress(self) -> None:
        """One line every PROGRESS_LOG_SECONDS while clean batches go out (a line per batch would be thousands)."""
        progress = self._progress
        now = time.monotonic()
        if now - progress.since < PROGRESS_LOG_SECONDS:
            return
        if progress.batches:
            log.info(
                "published %d events in %d batches over %.0f s; own %d lanes",
                progress.published,
                progress.batches,
                now - progress.since,
                len(self.owned),
                extra=fields(
                    event="relay_progress",
                    batches=progress.batches,
                    events=progress.events,
                    published=progress.published,
                    seconds=round(now - progress.since, 1),
                    lanes=len(self.owned),
                ),
            )
        self._progress = _Progress(now)

    def _maintained(self, report: MaintenanceReport | None) -> None:
        if report is None:
            self.metrics.maintenance_failures.inc()
            return
        self.metrics.maintenance_runs.inc()
        for outcome in report.partitions:
            self.metrics.maintenance_partitions.labels(outcome.action).inc()
        if report.keys_pruned:
            self.metrics.keys_pruned.inc(report.keys_pruned)

    def _adapt_depth(self, batch: list[ClaimedEvent]) -> None:
        share = max(MIN_PER_LANE, -(-self.batch_size // max(1, len(self.owned))))
        per_lane: dict[int, int] = {}
        for event in batch:
            per_lane[event.lane] = per_lane.get(event.lane, 0) + 1
        if per_lane and max(per_lane.values()) >= self.per_lane:
            self.per_lane = min(self.batch_size, MAX_PER_LANE, self.per_lane * 2)
        else:
            self.per_lane = max(share, self.per_lane // 2)

    async def _rebalance(self) -> None:
        live = await self.store.live_relays()
        held = await self.store.owned_by_anyone()
        lanes = plan(self.owned, held, live)
        self.metrics.maintenance_leader.set(int(self.maintenance.leading))
        if lanes.release:
            await self.store.release_lanes(lanes.release)
            self.owned.difference_update(lanes.release)
            log.info("released %d lanes (%d relays live); own %d", len(lanes.release), live, len(self.owned))
        if lanes.want > 0:
            taken = await self.store.take_lanes(lanes.take_from, lanes.want)
            if taken:
                self.owned |= taken
                log.info("took %d lanes (%d relays live); own %d", len(taken), live, len(self.owned))
        self.metrics.lanes.set(len(self.owned))

    async def _deliver(self, batch: list[ClaimedEvent]) -> list[Settlement]:
        routings = await self.store.routings(sorted({e.tenant_id for e in batch}))
        now = self.clock()
        records: list[KafkaRecord] = []
        positions: list[int] = []
        topics: list[str | None] = [None] * len(batch)
        outcomes: list[Delivered | Failed | None] = [None] * len(batch)
        built = [record_for(event, routings[event.tenant_id]) for event in batch]
        keys = [
            None if isinstance(r, str) or e.partition_key is None else (e.tenant_id, e.partition_key)
            for e, r in zip(batch, built, strict=True)
        ]
        deferred = held_back(keys, [None if isinstance(r, str) else (r.cluster, r.topic) for r in built])
        for index, record in enumerate(built):
            if isinstance(record, str):
                outcomes[index] = Failed(record, f"the routing gives no valid destination ({record})")
                continue
            if deferred[index]:
                continue
            records.append(record)
            positions.append(index)
            topics[index] = record.topic
        for index, outcome in zip(positions, await self.publisher.publish(records), strict=True):
            outcomes[index] = outcome

        settlements: list[Settlement] = []
        doomed: list[tuple[ClaimedEvent, Failed, str | None]] = []
        for event, result, topic, later in zip(batch, outcomes, topics, deferred, strict=True):
            if later:
                continue
            if isinstance(result, Delivered):
                settlements.append(Settlement(event, "published", result.topic, result.partition, result.offset))
            elif result is not None and (is_permanent(result.error) or gives_up(event.attempts + 1)):
                doomed.append((event, result, topic))
            else:
                failure = result or Failed("_MSG_TIMED_OUT", "no delivery report")
                settlements.append(self._retry(event, failure.text, now))
        settlements.extend(await self._bury(doomed, routings, now))
        return settlements

    async def _bury(
        self, doomed: list[tuple[ClaimedEvent, Failed, str | None]], routings: Mapping[str, Routing], now: datetime
    ) -> list[Settlement]:
        """Send each doomed event to its tenant's dead-letter topic, then settle it as dead (without the value if
        the value is what cannot be sent). An event whose dead-letter record fails only for now stays pending
        and is tried again later."""
        if not doomed:
            return []
        settlements: list[Settlement] = []
        for with_value in (True, False):
            records: list[KafkaRecord] = []
            pending: list[tuple[ClaimedEvent, Failed, str | None]] = []
            for event, failure, original in doomed:
                record = dead_letter_record(
                    event,
                    routings[event.tenant_id],
                    error=failure.text,
                    attempts=event.attempts + 1,
                    original_topic=original,
                    with_value=with_value,
                )
                if isinstance(record, str):
                    # No usable dead-letter topic: the dead-letters table still keeps the event.
                    settlements.append(Settlement(event, "dead", topic=original, error=failure.text))
                    continue
                records.append(record)
                pending.append((event, failure, original))
            results = await self.publisher.publish(records)
            doomed = []
            for (event, failure, original), result in zip(pending, results, strict=True):
                error = failure.text
                if isinstance(result, Delivered):
                    settlements.append(Settlement(event, "dead", topic=original, error=error))
                elif with_value and is_permanent(result.error):
                    doomed.append((event, failure, original))  # try once more without the value
                elif is_permanent(result.error):
                    # The dead-letter topic itself is unreachable for good (e.g. an unknown cluster): the
                    # dead-letters table still keeps the event, listed and redrivable through the API.
                    log.warning("dead-letter record for %s not sent: %s", event.event_id, result.error)
                    settlements.append(Settlement(event, "dead", topic=original, error=error))
                else:
                    settlements.append(self._retry(event, error, now))
            if not doomed:
                break
        return settlements

    def _retry(self, event: ClaimedEvent, error: str, now: datetime) -> Settlement:
        return Settlement(event, "retry", error=error, next_attempt_at=next_attempt(event.attempts, now, self.rand))
