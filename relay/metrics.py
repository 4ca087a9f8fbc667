"""What one relay process counts, served on its own port (`events-api relay --metrics-port 9464`, off by default).

The platform-wide view (backlog, lanes per relay, live relays, and `relay_published_total` for all relays) is on
the API's `GET /metrics`, read from the database; this endpoint adds what only the process knows: how its
batches went, how long claiming, producing and settling take, Kafka's errors and producer replacements,
maintenance. Each Relay has its own registry, so several relays in one process (tests) do not mix.
Everything here is counted per batch, not per event, so it costs the relay nothing measurable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BATCH_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2000, 5000)
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
MAX_ERROR_LABELS = 50  # librdkafka error names; any beyond these are counted as "other"


class RelayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.events = Counter(
            "relay_batch_events",
            "Events this relay settled, by outcome: published, retried (failed, scheduled again), dead_lettered",
            ["outcome"],
            registry=r,
        )
        self.batch_size = Histogram("relay_batch_size", "Events per claimed batch", buckets=BATCH_BUCKETS, registry=r)
        self.step_seconds = Histogram(
            "relay_step_duration_seconds",
            "Seconds per batch for each step: claim (read from the outbox), publish (produce and wait for Kafka's "
            "delivery reports), settle (the one statement that records the outcomes)",
            ["step"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self.delivery_lag = Histogram(
            "relay_delivery_lag_seconds",
            "Per batch: from the arrival (received_at) of its oldest event to the batch being settled; an upper "
            "bound of the 202-to-Kafka latency of its events",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.kafka_errors = Counter(
            "relay_kafka_errors",
            "Records Kafka (or the producer) did not accept, by librdkafka error name",
            ["error"],
            registry=r,
        )
        self.producers_replaced = Counter(
            "relay_producers_replaced",
            "Kafka producers discarded and created anew (broker restarts, fatal producer errors)",
            ["cluster"],
            registry=r,
        )
        self.lanes = Gauge("relay_owned_lanes", "Lanes this relay holds now", registry=r)
        self.reconnects = Counter(
            "relay_database_reconnects", "Times this relay lost its database session and started over", registry=r
        )
        self.maintenance_leader = Gauge(
            "relay_maintenance_leading", "1 while this relay leads the periodic maintenance", registry=r
        )
        self.maintenance_runs = Counter("relay_maintenance_runs", "Maintenance runs this relay did", registry=r)
        self.maintenance_failures = Counter(
            "relay_maintenance_failures", "Maintenance runs that failed (retried at the next tick)", registry=r
        )
        self.maintenance_partitions = Counter(
            "relay_maintenance_partitions",
            "Outbox partitions handled by maintenance runs, by action: created, dropped, kept, deferred",
            ["action"],
            registry=r,
        )
        self.keys_pruned = Counter(
            "relay_maintenance_idempotency_keys_pruned", "Expired idempotency keys deleted", registry=r
        )
        for outcome in ("published", "retried", "dead_lettered"):
            self.events.labels(outcome)
        for step in ("claim", "publish", "settle"):
            self.step_seconds.labels(step)
        for action in ("created", "dropped", "kept", "deferred"):
            self.maintenance_partitions.labels(action)
        self._errors: set[str] = set()

    def settled(self, published: int, retried: int, dead: int) -> None:
        if published:
            self.events.labels("published").inc(published)
        if retried:
            self.events.labels("retried").inc(retried)
        if dead:
            self.events.labels("dead_lettered").inc(dead)

    def failed_records(self, errors: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for error in errors:
            if error not in self._errors and len(self._errors) >= MAX_ERROR_LABELS:
                error = "other"
            self._errors.add(error)
            counts[error] = counts.get(error, 0) + 1
        for error, count in counts.items():
            self.kafka_errors.labels(error).inc(count)


def serve(metrics: RelayMetrics, port: int, host: str = "0.0.0.0") -> Any:
    """Serve the registry on http://host:port/metrics from a daemon thread; returns the server (`shutdown()`)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, host, registry=metrics.registry)
    return server
