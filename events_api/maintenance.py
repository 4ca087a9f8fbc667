"""Keeping the outbox's storage bounded: partitions created ahead, expired partitions dropped whole
once nothing in them is undelivered, expired idempotency keys pruned in batches.

`maintain` is one run (what `events-api maintain` does on demand). `MaintenanceLoop` runs it every
`interval` seconds inside each relay, but only in the one relay that holds the maintenance leader lock;
when that relay dies its lock goes with its session and another relay leads from its next tick.

    tick ──▶ leader? ──no──▶ wait for the next tick
               │yes
               ▼
    create partitions ahead ─▶ expired partitions: pending? keep : drop under lock ─▶ prune keys (batches)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import psycopg

from events_api.logs import fields
from events_api.settings import Settings
from events_api.storage.maintenance import MaintenanceStore
from events_api.storage.partitions import partition_day, partition_days, partition_end, partition_name

log = logging.getLogger("events_api.maintenance")

INTERVAL_SECONDS = 60.0
KEY_BATCH = 5000
KEY_TIME_BUDGET_SECONDS = 20.0  # per run; what is left is pruned by the next run
LOCK_TIMEOUT = timedelta(seconds=1)  # ingest may queue behind a partition DDL lock request for this long

Action = Literal["created", "dropped", "kept", "deferred"]


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    retention: timedelta
    partitions_ahead_days: int
    key_batch: int = KEY_BATCH
    key_time_budget: float = KEY_TIME_BUDGET_SECONDS
    lock_timeout: timedelta = LOCK_TIMEOUT

    @classmethod
    def from_settings(cls, settings: Settings) -> MaintenancePolicy:
        return cls(retention=settings.outbox_retention, partitions_ahead_days=settings.partitions_ahead_days)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    name: str
    day: date
    action: Action
    reason: str


@dataclass(slots=True)
class MaintenanceReport:
    now: datetime
    partitions: list[PartitionOutcome] = field(default_factory=list)
    retained: int = 0  # partitions within retention (or ahead), left as they are
    keys_pruned: int = 0
    key_batches: int = 0
    keys_done: bool = True  # False when the time budget ended pruning before the last expired key

    def with_action(self, action: Action) -> list[PartitionOutcome]:
        return [p for p in self.partitions if p.action == action]

    def summary(self) -> str:
        """One line for the log."""
        counts = ", ".join(f"{len(self.with_action(a))} {a}" for a in ("created", "dropped", "kept", "deferred"))
        more = "" if self.keys_done else " (more left for the next run)"
        return (
            f"partitions: {counts}, {self.retained} within retention; "
            f"idempotency keys pruned: {self.keys_pruned} in {self.key_batches} batch(es){more}"
        )


def is_expired(day: date, now: datetime, retention: timedelta) -> bool:
    """A day's partition is expired once its newest possible event is older than the retention."""
    return partition_end(day) <= now - retention


def expired_partitions(names: list[str], now: datetime, retention: timedelta) -> list[tuple[str, date]]:
    """The daily partitions among `names` that are past retention, oldest first. Tables this service did
    not name are never touched."""
    days = [(name, partition_day(name)) for name in names]
    return sorted(((n, d) for n, d in days if d is not None and is_expired(d, now, retention)), key=lambda p: p[1])


Progress = Callable[[str, int], None]  # (step, amount): "partition" per partition, "keys" per batch deleted


def _no_progress(step: str, amount: int) -> None:
    pass


async def maintain(
    store: MaintenanceStore,
    policy: MaintenancePolicy,
    now: datetime,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    progress: Progress = _no_progress,
    keep_going: Callable[[], bool] = lambda: True,
) -> MaintenanceReport:
    """One maintenance run at `now`. Each step is its own transaction; a run cut short (connection lost,
    `keep_going()` false) leaves a consistent state that the next run continues from."""
    report = MaintenanceReport(now)
    names = await store.partitions()
    missing = [day for day in partition_days(now, policy.partitions_ahead_days) if partition_name(day) not in names]
    if missing:
        try:
            created = await store.create_partitions(missing, lock_timeout=policy.lock_timeout)
        except psycopg.errors.LockNotAvailable:
            reason = "outbox busy; lock not granted in time, next run"
            report.partitions += [PartitionOutcome(partition_name(d), d, "deferred", reason) for d in missing]
        else:
            report.partitions += [
                PartitionOutcome(partition_name(d), d, "created", "ahead of time")
                for d in missing
                if partition_name(d) in created
            ]
            names = await store.partitions()

    expired = expired_partitions(names, now, policy.retention)
    report.retained = len(names) - len(expired)
    for name, day in expired:
        if not keep_going():
            break
        report.partitions.append(await _expire(store, policy, name, day))
        progress("partition", 1)

    started = monotonic()
    while True:
        if not keep_going() or monotonic() - started >= policy.key_time_budget:
            report.keys_done = False
            break
        deleted = await store.prune_idempotency_keys(now, policy.key_batch)
        report.key_batches += 1
        report.keys_pruned += deleted
        progress("keys", deleted)
        if deleted < policy.key_batch:
            break
    return report


async def _expire(store: MaintenanceStore, policy: MaintenancePolicy, name: str, day: date) -> PartitionOutcome:
    # A cheap look first, so a partition that still holds pending events never takes the outbox lock.
    pending = await store.pending_in_partition(name)
    if pending:
        return PartitionOutcome(name, day, "kept", f"{pending} pending event(s)")
    try:
        attempt = await store.drop_if_delivered(name, lock_timeout=policy.lock_timeout)
    except psycopg.errors.LockNotAvailable:
        return PartitionOutcome(name, day, "deferred", "outbox busy; lock not granted in time, next run")
    if attempt.gone:
        return PartitionOutcome(name, day, "dropped", "already dropped by another maintainer")
    if attempt.pending:
        return PartitionOutcome(name, day, "kept", f"{attempt.pending} pending event(s) arrived during the check")
    return PartitionOutcome(name, day, "dropped", "past retention, every event delivered or dead-lettered")


def _fields(report: MaintenanceReport, seconds: float) -> dict[str, object]:
    counts: dict[str, object] = {f"partitions_{a}": len(report.with_action(a)) for a in ("created", "dropped", "kept")}
    return fields(
        event="maintenance_run",
        **counts,
        partitions_deferred=len(report.with_action("deferred")),
        keys_pruned=report.keys_pruned,
        keys_done=report.keys_done,
        duration_ms=round(seconds * 1000, 1),
    )


def _utcnow() -> datetime:
    return datetime.now(UTC)


class MaintenanceLoop:
    """The periodic maintenance of one relay process; only the leader's loop does any work."""

    def __init__(
        self,
        conninfo: str,
        policy: MaintenancePolicy,
        *,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], datetime] = _utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        observe: Callable[[MaintenanceReport | None], None] = lambda report: None,
    ) -> None:
        self.store = MaintenanceStore(conninfo)
        # Called after each run this maintainer did (the report), and with None after a failed one (metrics).
        self.observe = observe
        self.policy = policy
        self.interval = interval
        self.clock = clock
        self.monotonic = monotonic
        # Observable by tests and (later) metrics.
        self.runs = 0
        self.last_report: MaintenanceReport | None = None

    @property
    def leading(self) -> bool:
        return self.store.leading

    async def tick(self, keep_going: Callable[[], bool] = lambda: True) -> MaintenanceReport | None:
        """One run if this maintainer leads (and no other run is in progress); None otherwise."""
        if not self.store.connected:
            await self.store.connect()
        if not await self.store.try_lead() or not await self.store.try_run_lock():
            return None
        try:
            report = await maintain(
                self.store, self.policy, self.clock(), monotonic=self.monotonic, keep_going=keep_going
            )
        finally:
            await self.store.release_run_lock()
        self.runs += 1
        self.last_report = report
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop` is set: a tick every `interval` seconds. Never raises: maintenance failing must not
        stop the relay it runs in; it is logged and tried again at the next tick."""
        was_leading = False
        try:
            while not stop.is_set():
                started = self.monotonic()
                try:
                    report = await self.tick(keep_going=lambda: not stop.is_set())
                    if self.leading and not was_leading:
                        log.info("this relay now leads maintenance")
                    if report is not None:
                        self.observe(report)
                        log.info("maintenance: %s", report.summary(), extra=_fields(report, self.monotonic() - started))
                except psycopg.OperationalError as exc:
                    self.observe(None)
                    log.warning("maintenance: database unavailable (%s); will retry", type(exc).__name__)
                    await self.store.close()
                except Exception:
                    self.observe(None)
                    log.exception("maintenance failed; will retry")
                    await self.store.close()  # a new session: nothing is left half done (each step is atomic)
                was_leading = self.leading
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval)
        finally:
            await self.store.close()
