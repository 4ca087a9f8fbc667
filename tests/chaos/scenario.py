"""What every chaos scenario does once its faults are over: drain the outbox, stop the relays, read the topic back,
run the checker and the database checks, print the summary line, and fail with every broken promise listed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.chaos.checker import Accepted, Seen, Verdict, check
from tests.support.chaos import (
    LoadGenerator,
    RelayFleet,
    StorageReport,
    Tenant,
    create_tenant,
    outbox_rows,
    storage_report,
    wait_drained,
)
from tests.support.kafka import Broker


def start_scenario(
    name: str, database_url: str, api_url: str, broker: Broker, logs: Path, relays: int
) -> tuple[Tenant, RelayFleet]:
    """A new tenant with its topic (4 partitions), and `relays` relays logging under `logs/<name>-<tenant>`."""
    tenant = create_tenant(api_url)
    broker.create_topic(tenant.topic, partitions=4)
    where = logs / f"{name}-{tenant.id}"
    where.mkdir()
    fleet = RelayFleet(database_url, broker.bootstrap, where)
    fleet.spawn(relays)
    return tenant, fleet


def drain_and_stop(fleet: RelayFleet, database_url: str, tenant: Tenant, timeout: float) -> float:
    """Until the relays have settled every event of the tenant; then stop them, each cleanly (exit 0).
    Returns how long the drain took."""
    try:
        fleet.wait_connected()
        took = wait_drained(database_url, tenant.id, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.log_tails()}") from exc
    codes = fleet.stop()
    assert codes == [0] * len(codes), f"relays exited with {codes}\n{fleet.log_tails()}"
    return took


def conclude(
    scenario: str,
    *,
    seed: int,
    started: float,
    load: LoadGenerator,
    fleet: RelayFleet,
    database_url: str,
    tenant: Tenant,
    generations: Sequence[Sequence[tuple[str, str | None, int, int]]],
    faults: str,
    report: Callable[[str], None],
) -> tuple[Verdict, StorageReport]:
    """Check delivery (`generations`: what each broker generation held, oldest first) and storage, report the
    summary line, and assert that nothing was lost, reordered, duplicated beyond what was in flight, or stored
    without its acknowledgement (or the reverse)."""
    accepted = [Accepted(event_id, key, n) for event_id, key, n in load.accepted()]
    seen = [
        Seen(ce_id, key, generation, partition, offset)
        for generation, records in enumerate(generations)
        for ce_id, key, partition, offset in records
    ]
    verdict = check(scenario, accepted, seen, in_flight=fleet.in_flight(), bound=fleet.duplicate_bound())
    storage = storage_report(database_url, tenant.id, load.requests)
    elapsed = time.monotonic() - started
    report(f"{verdict.line()} | {faults} | {load.summary()} | {storage.line()} | seed={seed} {elapsed:.0f}s")
    problems = verdict.problems() + storage.problems()
    if verdict.lost:
        problems.append("where the outbox says the first lost events went:")
        problems.extend(f"  {row}" for row in outbox_rows(database_url, tenant.id, verdict.lost[:10]))
    assert not problems, "\n".join(problems) + "\n" + fleet.log_tails()
    return verdict, storage
