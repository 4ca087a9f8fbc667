"""The chaos suite (issue 9): relays, API workers, PostgreSQL and the broker fail while clients publish; a checker
then compares what Kafka holds with what the clients were told was accepted.

Every scenario runs at two scales. `bounded` (marker `chaos`) is part of `make test` and fits in about a minute
on a 2-core machine; `long` (marker `chaos_long`: tens of thousands of events, many more faults) only runs when
asked for: `pytest tests/chaos -m chaos_long` or `CHAOS_SCALE=long pytest tests/chaos`.
`CHAOS_SEED=<n>` replays a run's random choices (the seed is in each summary line).

Each scenario prints one summary line (delivered / lost / out of order / duplicates / in-flight bound, what the
clients saw and what the database holds) in the "chaos summary" section at the end of the pytest output.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import fresh_database
from tests.support.chaos import ApiServer, log_tail
from tests.support.kafka import Broker, running_broker

T = TypeVar("T")
SUMMARY: list[str] = []
LONG_ENV = "CHAOS_SCALE"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: the bounded chaos scenarios (part of make test)")
    config.addinivalue_line("markers", "chaos_long: the long chaos scenarios (make chaos; CHAOS_SCALE=long)")


def _long_wanted(config: pytest.Config) -> bool:
    return os.environ.get(LONG_ENV, "") == "long" or "chaos_long" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long scenarios only when asked for; with CHAOS_SCALE=long, only them."""
    long_wanted = _long_wanted(config)
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        is_long = item.get_closest_marker("chaos_long") is not None
        is_bounded = item.get_closest_marker("chaos") is not None
        if (is_long and not long_wanted) or (is_bounded and os.environ.get(LONG_ENV, "") == "long"):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARY:
        terminalreporter.section("chaos summary")
        for line in SUMMARY:
            terminalreporter.write_line(line)


def scaled(bounded: T, long: T) -> list[Any]:
    """`@pytest.mark.parametrize("params", scaled(BOUNDED, LONG))`: the two scales of a scenario."""
    return [
        pytest.param(bounded, id="bounded", marks=pytest.mark.chaos),
        pytest.param(long, id="long", marks=pytest.mark.chaos_long),
    ]


@pytest.fixture
def report() -> Callable[[str], None]:
    """Add a line to the chaos summary printed at the end of the run."""
    return SUMMARY.append


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1_000_000))


@pytest.fixture(scope="package")
def chaos_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the servers and relays write their logs (pytest keeps the last runs' temp dirs)."""
    return tmp_path_factory.mktemp("chaos-logs")


@pytest.fixture(scope="package")
def shared_db() -> Iterator[str]:
    """A migrated database of the shared PostgreSQL for the scenarios that do not restart PostgreSQL; each
    scenario has its own tenant, and drains its events before it ends."""
    with fresh_database("events_api_chaos") as url:
        yield url


@pytest.fixture(scope="package")
def shared_api(shared_db: str, chaos_logs: Path) -> Iterator[ApiServer]:
    """`events-api serve --workers 2` on `shared_db`."""
    server = ApiServer(shared_db, chaos_logs)
    try:
        yield server
    finally:
        server.stop()
    assert not server.tracebacks(), log_tail(server.log_path, 80)


@pytest.fixture
def broker() -> Iterator[Broker]:
    """A broker of the test's own (a restart empties it, and must not disturb anyone else)."""
    with running_broker() as started:
        yield started
