"""(b) An API worker of `events-api serve --workers 2` SIGKILLed while PostgreSQL runs its outbox statement, as
clients publish with idempotency keys: every 202 has its event in the database and then in Kafka, no idempotency
row lacks its event nor the reverse, and a client whose connection broke retries with the same key and ends with
exactly one event."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.chaos.conftest import scaled
from tests.chaos.scenario import conclude, drain_and_stop, start_scenario
from tests.support.chaos import ApiServer, LoadGenerator, LoadPlan, read_topic
from tests.support.kafka import Broker

# Connection failures a client may see when the worker holding its connection dies.
TRANSPORT_FAILURES = frozenset({"ReadError", "RemoteProtocolError", "WriteError", "ConnectError"})


@dataclass(frozen=True)
class Params:
    load: LoadPlan
    kills: int
    relays: int
    timeout: float


BOUNDED = Params(LoadPlan(keys=60, events=1000, producers=12, rate=250), kills=2, relays=2, timeout=60)
LONG = Params(LoadPlan(keys=200, events=10000, producers=16, rate=300), kills=10, relays=2, timeout=300)


@pytest.mark.parametrize("params", scaled(BOUNDED, LONG))
def test_api_worker_killed_mid_request_loses_no_accepted_event(
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
    tenant, fleet = start_scenario("worker-kills", shared_db, shared_api.base_url, broker, chaos_logs, params.relays)
    kills_before = len(shared_api.kills)
    load = LoadGenerator(shared_api.base_url, tenant, params.load, seed)
    try:
        fleet.wait_connected()
        shared_api.wait_for_workers()
        with load, psycopg.connect(shared_db, autocommit=True) as sql:
            share = params.load.events / params.kills  # each kill at a random moment of its share of the run
            for kill in range(params.kills):
                load.wait_for_progress(int(share * (kill + rng.uniform(0.2, 0.8))), params.timeout)
                shared_api.kill_worker_mid_statement(sql, rng)
                shared_api.wait_for_workers()  # the supervisor starts a new one
            load.wait(params.timeout)
        drain_and_stop(fleet, shared_db, tenant, params.timeout)
    finally:
        fleet.kill_all()

    kills = shared_api.kills[kills_before:]
    caught = sum(k.mid_statement for k in kills)
    conclude(
        f"api-worker-kills[{params.load.events}]",
        seed=seed,
        started=started,
        load=load,
        fleet=fleet,
        database_url=shared_db,
        tenant=tenant,
        generations=[read_topic(broker.bootstrap, tenant.topic)],
        faults=f"faults: {len(kills)} worker SIGKILLs ({caught} mid-statement)",
        report=report,
    )
    assert caught >= 1, "no worker was killed while its outbox statement ran"
    broken = [r for r in load.requests if TRANSPORT_FAILURES.intersection(r.failures)]
    assert broken, "no client saw its connection break: the kills missed every request"
    # Each of them retried with its key and got its 202 (the load generator fails otherwise); `conclude` showed the
    # database holds exactly the events of the 202s, one per key.
    assert all(len(r.event_ids) == len(r.events) for r in broken)
    unexpected = {f for r in load.requests for f in r.failures} - TRANSPORT_FAILURES - {"503", "409"}
    assert not unexpected, f"clients saw {unexpected} around a worker kill"
