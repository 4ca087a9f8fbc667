"""The naive outbox relay the seed articles show, as the baseline for the `relay` scenario.

    loop:
        BEGIN
        SELECT ... FROM naive_relay_outbox WHERE published = false ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED
        for each row:
            producer.produce(...); producer.flush()          # wait for this one record's ack
            UPDATE naive_relay_outbox SET published = true WHERE id = %s
        COMMIT

One Kafka round trip (a flush) and one PostgreSQL round trip per event. The producer has librdkafka's
defaults (acks=all), like the articles'. It stops after `--seconds`, on SIGTERM (after the batch in
hand) or when the table is drained, and prints how many events it published.
Configuration: NAIVE_DATABASE_URL, NAIVE_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

import psycopg
from confluent_kafka import Producer

from bench.backlog import NAIVE_TABLE

BATCH = 100
_SELECT = (
    f"SELECT id, event_id, tenant_id, event_type, partition_key, payload FROM {NAIVE_TABLE} "
    f"WHERE published = false ORDER BY id LIMIT {BATCH} FOR UPDATE SKIP LOCKED"
)
_MARK = f"UPDATE {NAIVE_TABLE} SET published = true WHERE id = %s"


def relay(conn: psycopg.Connection[Any], producer: Any, seconds: float, stopping: list[int]) -> int:
    published = 0
    failed: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopping:
        with conn.transaction():
            rows = conn.execute(_SELECT).fetchall()
            for row_id, event_id, tenant_id, event_type, partition_key, payload in rows:
                producer.produce(
                    f"{tenant_id}.{event_type}",
                    key=partition_key.encode(),
                    value=payload,
                    headers=[("ce_id", event_id.encode()), ("ce_type", event_type.encode())],
                    on_delivery=report,
                )
                producer.flush()
                if failed:
                    raise RuntimeError(f"delivery failed: {failed[0]}")
                conn.execute(_MARK, (row_id,))
                published += 1
        if not rows:
            break
    return published


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.naive_relay", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="stop after this long")
    args = parser.parse_args()
    stopping: list[int] = []  # SIGTERM: finish the batch in hand, then report
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    producer = Producer({"bootstrap.servers": os.environ["NAIVE_BOOTSTRAP_SERVERS"]})
    started = time.monotonic()
    with psycopg.connect(os.environ["NAIVE_DATABASE_URL"], autocommit=True) as conn:
        published = relay(conn, producer, args.seconds, stopping)
    elapsed = time.monotonic() - started
    print(f"naive relay: published {published} events in {elapsed:.1f}s ({published / elapsed:,.0f}/s)", flush=True)
    producer.flush(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
