"""(d) The Kafka broker restarted while relays forward a steady load: once it is back, every accepted event is
delivered, in order per key.

Tansu keeps its records in memory, so a restart starts an empty broker (a real Kafka keeps them). To still see
everything that reached Kafka, the relays are frozen (SIGSTOP) just before the broker stops, the old broker is read
to its end, and the relays are let go again as the broker goes down: the checker gets the old broker's records
followed by the new one's. What was pending at that moment is what may arrive twice. An idempotent producer does
not survive a Tansu restart (the new broker forgets its producer id): the relays' records then time out
(`message.timeout.ms`, 15 s) before they replace the producer, so the recovery takes that long. Tansu also hands
out producer ids from 1 again, which a real Kafka never does; the relays are paused while the new broker starts and
the harness takes the first ids itself (`burn_producer_ids`), so that no new producer shares an old one's id.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.conftest import scaled
from tests.chaos.scenario import conclude, drain_and_stop, start_scenario
from tests.support.chaos import (
    ApiServer,
    LoadGenerator,
    LoadPlan,
    burn_producer_ids,
    describe,
    read_topic,
)
from tests.support.kafka import Broker


@dataclass(frozen=True)
class Params:
    load: LoadPlan
    restarts: tuple[bool, ...]  # one per restart: SIGKILL the broker (a crash) rather than stop it (SIGINT)
    downtime: tuple[float, float]
    relays: int
    timeout: float


BOUNDED = Params(
    LoadPlan(keys=60, events=1000, producers=6, batch=5, rate=200),
    restarts=(False,),
    downtime=(0.5, 1.5),
    relays=2,
    timeout=90,
)
LONG = Params(
    LoadPlan(keys=200, events=20000, producers=8, batch=10, rate=250),
    restarts=(False, True) * 2,
    downtime=(0.5, 5.0),
    relays=3,
    timeout=300,
)


@pytest.mark.parametrize("params", scaled(BOUNDED, LONG))
def test_broker_restarted_under_relay_load_delivers_everything(
    params: Params,
    shared_db: str,
    shared_api: ApiServer,
    broker: Broker,
    chaos_logs: Path,
    seed: int,
    report: Callable[[str], None],
) -> None:
    started = time.monotonic()
    rng = random.Random(seed)
    tenant, fleet = start_scenario("broker-restarts", shared_db, shared_api.base_url, broker, chaos_logs, params.relays)
    generations: list[list[Any]] = []
    burned = 0  # producer ids the harness took from the last broker generation
    load = LoadGenerator(shared_api.base_url, tenant, params.load, seed)
    try:
        fleet.wait_connected()
        with load:
            share = params.load.events / len(params.restarts)
            for index, kill in enumerate(params.restarts):
                load.wait_for_progress(int(share * (index + rng.uniform(0.2, 0.6))), params.timeout)
                with fleet.frozen("broker restart"):
                    generations.append(read_topic(broker.bootstrap, tenant.topic))
                    broker.stop(kill=kill)
                time.sleep(rng.uniform(*params.downtime))  # the outage the relays live through
                with fleet.paused():  # so that the new broker's first producer ids are ours (see burn_producer_ids)
                    broker.start()
                    burned = burned + fleet.producers_created() + 4  # above any id a relay's producer may hold
                    burn_producer_ids(broker.bootstrap, burned)
                    broker.create_topic(tenant.topic, partitions=4)
            load.wait(params.timeout)
        drain_and_stop(fleet, shared_db, tenant, params.timeout)
    finally:
        fleet.kill_all()
    generations.append(read_topic(broker.bootstrap, tenant.topic))

    conclude(
        f"broker-restarts[{params.load.events}]",
        seed=seed,
        started=started,
        load=load,
        fleet=fleet,
        database_url=shared_db,
        tenant=tenant,
        generations=generations,
        faults=f"faults: broker {'/'.join('SIGKILL' if k else 'stop' for k in params.restarts)} and restart, "
        f"records per broker generation {[len(g) for g in generations]}, "
        f"relay tracebacks: {describe(fleet.tracebacks())}",
        report=report,
    )
    assert all(generations), "a broker generation received nothing: the restart did not happen under load"
    assert not fleet.tracebacks(), fleet.log_tails()
