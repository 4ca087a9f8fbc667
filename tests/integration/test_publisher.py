"""The relay's publisher against a real broker that lost its state: a producer whose id the restarted
broker handed to someone else fails fatally; the batch must come back as failures (to retry) and the
producer be replaced, never raise out of the relay's loop."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from relay.publisher import Delivered, Failed, KafkaPublisher
from relay.records import KafkaRecord
from tests.support.kafka import running_broker

TOPIC = "publisher.fatal"


def _records(n: int, start: int = 0) -> list[KafkaRecord]:
    return [KafkaRecord("default", TOPIC, b"k", f'{{"n": {start + i}}}'.encode(), []) for i in range(n)]


async def test_a_fatal_producer_error_fails_the_batch_and_replaces_the_producer() -> None:
    with running_broker() as broker:
        broker.create_topic(TOPIC, partitions=1)
        replaced: list[str] = []
        publisher = KafkaPublisher(
            {"default": broker.bootstrap}, {"message.timeout.ms": 5000}, on_replaced=replaced.append
        )
        assert all(isinstance(o, Delivered) for o in await publisher.publish(_records(50)))
        broker.restart()  # Tansu hands out producer ids from 1 again
        fresh: Any = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all"})
        for i in range(10):
            fresh.produce(TOPIC, key=b"other", value=str(i).encode())
        fresh.flush(10)  # the fresh producer now holds the old one's id
        outcomes = await publisher.publish(_records(10, start=50))  # must not raise
        failed = [o for o in outcomes if isinstance(o, Failed)]
        if failed:  # the old producer was fenced: its batch is to be retried, on a new producer
            assert replaced == ["default"]
        again = await publisher.publish(_records(10, start=60))
        assert all(isinstance(o, Delivered) for o in again), again
        publisher.close()
