"""(a) Three relays SIGKILLed at random and restarted while clients publish on many keys: nothing lost, every key
in accept order, and only events that a killed relay had pending in its lanes may arrive twice."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.conftest import scaled
from tests.chaos.scenario import conclude, drain_and_stop, start_scenario
from tests.support.chaos import ApiServer, LoadGenerator, LoadPlan, describe, read_topic
from tests.support.kafka import Broker


@dataclass(frozen=True)
class Params:
    load: LoadPlan
    relays: int
    kill_every: tuple[float, float]  # seconds between kills, uniformly drawn
    restart_after: tuple[float, float]  # seconds a killed relay stays dead
    min_kills: int
    timeout: float  # for the load and for the drain, each


BOUNDED = Params(
    LoadPlan(keys=100, events=3000, producers=4, batch=25, rate=400),
    relays=3,
    kill_every=(0.3, 0.9),
    restart_after=(0.1, 0.5),
    min_kills=6,
    timeout=60,
)
LONG = Params(
    LoadPlan(keys=200, events=40000, producers=8, batch=25, rate=700),
    relays=3,
    kill_every=(0.3, 1.5),
    restart_after=(0.1, 1.0),
    min_kills=40,
    timeout=300,
)


@pytest.mark.parametrize("params", scaled(BOUNDED, LONG))
def test_relays_killed_at_random_lose_nothing_and_keep_order(
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
    tenant, fleet = start_scenario("relay-kills", shared_db, shared_api.base_url, broker, chaos_logs, params.relays)
    load = LoadGenerator(shared_api.base_url, tenant, params.load, seed)
    try:
        fleet.wait_connected()
        with load:
            while load.running or fleet.kills < params.min_kills:
                time.sleep(rng.uniform(*params.kill_every))
                fleet.kill(rng)
                time.sleep(rng.uniform(*params.restart_after))
                fleet.spawn()
            load.wait(params.timeout)
        drain_and_stop(fleet, shared_db, tenant, params.timeout)
    finally:
        fleet.kill_all()

    conclude(
        f"relay-kills[{params.load.events}]",
        seed=seed,
        started=started,
        load=load,
        fleet=fleet,
        database_url=shared_db,
        tenant=tenant,
        generations=[read_topic(broker.bootstrap, tenant.topic)],
        faults=f"faults: {fleet.kills} relay SIGKILLs, relay tracebacks: {describe(fleet.tracebacks())}",
        report=report,
    )
    assert fleet.kills >= params.min_kills
    assert not fleet.tracebacks(), fleet.log_tails()
