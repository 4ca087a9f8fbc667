"""Producing records to the Kafka clusters the relay knows, and waiting for their delivery reports.

One idempotent producer per named cluster (`enable.idempotence`, `acks=all`: librdkafka keeps the
order within a partition across its retries). A batch is produced, then flushed in a thread (so the
event loop stays free); each record ends with its coordinates or with an error name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from relay.records import KafkaRecord

log = logging.getLogger("relay.publisher")

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 15000,
    "queue.buffering.max.messages": 500000,
    "queue.buffering.max.kbytes": 1048576,
}
FLUSH_SECONDS = 30.0
# What flush()/poll() raise when the producer hits a fatal error. confluent-kafka then still runs delivery
# callbacks with that exception pending, and it comes out as a SystemError from inside the callback.
_PRODUCER_FAILURES = (KafkaException, SystemError)
# After these an idempotent producer is unusable: a broker that lost its state (a restart) answers its old
# producer id with UNKNOWN_PRODUCER_ID, which librdkafka retries until every record times out.
_REPLACE_PRODUCER = frozenset(
    {
        "_MSG_TIMED_OUT",
        "UNKNOWN_PRODUCER_ID",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "_FATAL",
    }
)


@dataclass(frozen=True, slots=True)
class Delivered:
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Failed:
    error: str  # the librdkafka error name, e.g. MSG_SIZE_TOO_LARGE, _MSG_TIMED_OUT, UNKNOWN_CLUSTER
    detail: str

    @property
    def text(self) -> str:
        """As stored in `last_error` and sent in the dead-letter `error` header."""
        return f"{self.error}: {self.detail}"


Outcome = Delivered | Failed


class KafkaPublisher:
    def __init__(
        self,
        clusters: Mapping[str, str],
        overrides: Mapping[str, Any] | None = None,
        *,
        on_replaced: Callable[[str], None] = lambda cluster: None,
    ) -> None:
        self.clusters = dict(clusters)
        self.overrides = dict(overrides or {})
        self.on_replaced = on_replaced  # told each time a cluster's producer is discarded (metrics)
        self._producers: dict[str, Any] = {}

    def _producer(self, cluster: str) -> Any | None:
        if cluster not in self.clusters:
            return None
        if cluster not in self._producers:
            config = {**PRODUCER_DEFAULTS, **self.overrides, "bootstrap.servers": self.clusters[cluster]}
            config["client.id"] = f"events-api-relay-{cluster}"
            self._producers[cluster] = Producer(config)
        return self._producers[cluster]

    async def publish(self, records: Sequence[KafkaRecord]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(records)
        used: dict[str, Any] = {}
        broken: set[str] = set()

        def on_delivery(index: int, cluster: str) -> Any:
            def report(err: KafkaError | None, msg: Any) -> None:
                if err is None:
                    outcomes[index] = Delivered(msg.topic(), msg.partition(), msg.offset())
                else:
                    outcomes[index] = Failed(err.name(), err.str())
                    if err.fatal() or err.name() in _REPLACE_PRODUCER:
                        broken.add(cluster)

            return report

        for index, record in enumerate(records):
            producer = self._producer(record.cluster)
            if producer is None:
                outcomes[index] = Failed("UNKNOWN_CLUSTER", f"the relay knows no Kafka cluster {record.cluster!r}")
                continue
            used[record.cluster] = producer
            while True:
                try:
                    producer.produce(
                        record.topic,
                        value=record.value,
                        key=record.key,
                        headers=record.headers,
                        on_delivery=on_delivery(index, record.cluster),
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    try:
                        await asyncio.to_thread(producer.poll, 0.1)
                    except _PRODUCER_FAILURES as exc:
                        log.warning("Kafka producer for cluster %s failed: %s", record.cluster, _name(exc))
                        broken.add(record.cluster)
                        break
                except KafkaException as exc:
                    err = exc.args[0]
                    outcomes[index] = Failed(err.name(), err.str())
                    if err.fatal() or err.name() in _REPLACE_PRODUCER:
                        broken.add(record.cluster)
                    break
        for cluster, producer in used.items():
            try:
                await asyncio.to_thread(producer.flush, FLUSH_SECONDS)
            except _PRODUCER_FAILURES as exc:  # a fatal error surfaces here too
                log.warning("Kafka producer for cluster %s failed: %s", cluster, _name(exc))
                broken.add(cluster)
        for index, record in enumerate(records):
            if outcomes[index] is None:  # still queued after the flush: that producer cannot be trusted
                broken.add(record.cluster)
        for cluster in broken:
            log.warning("replacing the Kafka producer for cluster %s", cluster)
            self._discard(cluster)
            self.on_replaced(cluster)
        return [o if o is not None else Failed("_MSG_TIMED_OUT", "no delivery report in time") for o in outcomes]

    def _discard(self, cluster: str) -> None:
        producer = self._producers.pop(cluster, None)
        if producer is not None:
            producer.purge()  # drop what it still holds, so destroying it does not wait on a dead broker

    def close(self) -> None:
        for producer in self._producers.values():
            producer.flush(FLUSH_SECONDS)
        self._producers.clear()


def _name(exc: BaseException) -> str:
    """The librdkafka error name behind a producer failure (a SystemError wraps the KafkaException)."""
    cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        return str(cause.args[0].name())
    return type(exc).__name__
