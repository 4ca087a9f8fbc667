"""GET /metrics: per-process request metrics summed across `serve`'s workers, the platform's gauges read from the
database, the relays' counts (on the API and on a relay's own port), and the alert rules that use them."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from events_api.http.app import build_services, create_app
from events_api.metrics import MAX_TENANT_LABELS, OTHER, ApiMetrics, PlatformMetrics, worker_directories
from events_api.settings import Settings
from relay.relay import Relay
from tests.conftest import (
    ADMIN,
    ADMIN_TOKEN,
    ALL_SCOPES,
    ORDER_SCHEMA,
    free_port,
    fresh_database,
    idem,
    new_tenant,
    order,
    serving,
)
from tests.support.asgi import running
from tests.support.kafka import Broker, broker_fixture
from tests.support.relays import relay_running

kafka_broker = broker_fixture(scope="module")
ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
CONTRACT = (
    "outbox_unpublished_events",
    "outbox_oldest_unpublished_age_seconds",
    "outbox_dead_letter_events",
    "relay_published_total",
    "http_request_duration_seconds_bucket",
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


async def scrape(client: httpx.AsyncClient, path: str = "/metrics") -> Samples:
    response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


@pytest.fixture
async def uncached(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The in-process app, with the database's side of /metrics read at every scrape."""
    services = build_services(settings)
    services = dataclasses.replace(services, platform_metrics=PlatformMetrics(services.db, cache_seconds=0))
    async with running(create_app(services=services)) as test_client:
        yield test_client


async def test_metrics_in_process(uncached: httpx.AsyncClient) -> None:
    client = uncached
    tenant = await new_tenant(client)
    registered = await client.post(
        "/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth
    )
    assert registered.status_code == 201
    before = await scrape(client)
    for n in range(3):
        assert (await client.post("/v1/events", json=order(n), headers={**tenant.auth, **idem()})).status_code == 202
    key = idem()
    for _ in range(2):  # the second is a replay: 202 again, no new event
        assert (await client.post("/v1/events", json=order(9), headers={**tenant.auth, **key})).status_code == 202
    batch = {"events": [order(1), order(2)]}
    assert (await client.post("/v1/events/batch", json=batch, headers={**tenant.auth, **idem()})).status_code == 202
    invalid = await client.post("/v1/events", json=order(-1), headers={**tenant.auth, **idem()})
    assert invalid.status_code == 422
    assert (await client.get("/v1/nothing/here")).status_code == 404
    after = await scrape(client)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    count = "http_request_duration_seconds_count"
    assert delta(count, route="/v1/events", method="POST", status="202") == 5
    assert delta(count, route="/v1/events/batch", method="POST", status="202") == 1
    assert delta(count, route="/v1/events", method="POST", status="422") == 1
    assert delta(count, route="unmatched", method="GET", status="404") == 1
    assert delta("events_accepted_total") == 6  # 3 single, 2 in the batch, 1 before its replay
    for name in CONTRACT:
        assert any(n == name for n, _ in after), name
    assert value(after, "events_api_ready") == 1
    assert value(after, "outbox_partitions") >= 4  # today and 3 ahead (tests migrate with 3)
    assert value(after, "outbox_partitions_bytes") > 0
    assert total(after, "outbox_unpublished_events") - total(before, "outbox_unpublished_events") == 6
    assert value(after, "outbox_oldest_unpublished_age_seconds") >= 0


def test_tenant_labels_are_bounded() -> None:
    metrics = ApiMetrics()
    for n in range(MAX_TENANT_LABELS + 5):
        metrics.count_accepted(f"t-{n}", 2)
    metrics.count_accepted("t-0", 1)
    samples = {
        s.labels["tenant"]: s.value
        for family in metrics.registry.collect()
        if family.name == "events_accepted"
        for s in family.samples
        if s.name == "events_accepted_total"
    }
    assert len(samples) == MAX_TENANT_LABELS + 1
    assert samples[OTHER] == 10
    assert samples["t-0"] == 3


def _worker_pids(base_url: str) -> set[str]:
    """The pids that wrote metric files for the server listening at `base_url` (found by its supervisor's
    command line among the per-`serve` directories)."""
    port = base_url.rsplit(":", 1)[1]
    for directory in worker_directories().iterdir():
        try:
            cmdline = Path(f"/proc/{directory.name.split('-')[0]}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and port.encode() in cmdline:
            return {f.stem.rsplit("_", 1)[1] for f in directory.glob("*.db")}
    raise AssertionError(f"no metrics directory for the server on port {port}")


def test_counts_are_summed_across_workers(database_url: str) -> None:
    with serving(database_url, workers=2) as base:
        with httpx.Client(base_url=base, headers=ADMIN) as http:
            tenant = "m-" + secrets.token_hex(4)
            assert http.post("/v1/tenants", json={"id": tenant}).status_code == 201
            key = http.post(f"/v1/tenants/{tenant}/api-keys", json={"scopes": ALL_SCOPES}).json()["key"]
            auth = {"Authorization": f"Bearer {key}"}
            assert (
                http.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=auth)
            ).status_code == 201
        sent = 40
        for n in range(sent):  # a new connection each time, so both workers take some
            response = httpx.post(f"{base}/v1/events", json=order(n), headers={**auth, **idem()})
            assert response.status_code == 202
        counts = set()
        for _ in range(6):  # whichever worker answers the scrape, it reports every worker's counts
            samples = parse(httpx.get(f"{base}/metrics").text)
            counts.add(
                (
                    value(samples, "events_accepted_total", tenant=tenant),
                    value(
                        samples, "http_request_duration_seconds_count", route="/v1/events", method="POST", status="202"
                    ),
                )
            )
        assert counts == {(sent, sent)}
        assert len(_worker_pids(base)) == 2


async def eventually(check: Any, timeout: float = 15.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(interval)


@pytest.fixture
def own_db() -> Iterator[str]:
    """A database of its own: its relay_stats and backlog are this test's alone."""
    with fresh_database("events_api_metrics") as url:
        yield url


async def test_relay_counts_on_the_api_and_on_the_relays_port(own_db: str, kafka_broker: Broker) -> None:
    port = free_port()
    settings = Settings(database_url=own_db, admin_token=ADMIN_TOKEN)
    async with (
        running(create_app(services=build_services(settings))) as api,
        relay_running(own_db, kafka_broker.bootstrap, metrics_port=port) as relay,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as relay_http,
    ):
        tenant = await new_tenant(api)
        assert (
            await api.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=tenant.auth)
        ).status_code == 201
        ids = []
        for n in range(5):
            response = await api.post("/v1/events", json=order(n), headers={**tenant.auth, **idem()})
            ids.append(response.json()["event_id"])

        async def delivered() -> Samples | None:
            samples = await scrape(api)
            done = value(samples, "relay_published_total") == 5 and value(samples, "outbox_unpublished_events") == 0
            return samples if done and value(samples, "relay_lanes_unowned") == 0 else None

        platform = await eventually(delivered, timeout=20)
        assert platform, "the API's /metrics never showed the 5 events published"
        assert value(platform, "relay_instances") == 1
        assert total(platform, "relay_lanes_owned") == 256
        assert value(platform, "outbox_oldest_unpublished_age_seconds") == 0
        assert value(platform, "relay_retries_total") == 0
        assert value(platform, "relay_dead_lettered_total") == 0

        own = await scrape(relay_http)
        assert value(own, "relay_batch_events_total", outcome="published") == 5
        assert value(own, "relay_owned_lanes") == 256 == len(relay.owned)
        assert value(own, "relay_batch_size_sum") == 5
        for step in ("claim", "publish", "settle"):
            assert value(own, "relay_step_duration_seconds_count", step=step) >= 1
        assert value(own, "relay_delivery_lag_seconds_count") >= 1

        async def leading() -> bool:
            samples = await scrape(api)
            return value(samples, "relay_maintenance_leaders") == 1

        assert await eventually(leading), "the relay never showed as the maintenance leader"
        assert value(await scrape(relay_http), "relay_maintenance_leading") == 1
    with pytest.raises(httpx.TransportError):  # the relay's endpoint goes with it
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


async def test_a_taken_metrics_port_is_a_configuration_error(own_db: str, kafka_broker: Broker) -> None:
    import socket

    from events_api.settings import SettingsError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        relay = Relay(Settings(database_url=own_db, kafka_bootstrap_servers=kafka_broker.bootstrap), metrics_port=port)
        relay.metrics_host = "127.0.0.1"
        with pytest.raises(SettingsError, match="metrics port"):
            await relay.run(asyncio.Event())


# --- the alert rules -------------------------------------------------------------------------------------


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_are_the_documented_ones() -> None:
    names = [rule["alert"] for rule in _rules()]
    assert names == ["EventsApiOutboxBacklogStale", "EventsApiDeadLetters", "EventsApiRelayDown", "EventsApiNotReady"]
    runbook = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for name in names:
        assert f"### {name}" in runbook, name


async def test_alert_rules_use_metrics_the_services_expose(own_db: str, kafka_broker: Broker) -> None:
    """Every metric an alert names is on /metrics of an API with a relay running (except Prometheus's `up`)."""
    import re

    settings = Settings(database_url=own_db, admin_token=ADMIN_TOKEN)
    async with (
        running(create_app(services=build_services(settings))) as api,
        relay_running(own_db, kafka_broker.bootstrap),
    ):
        exposed = {name for name, _ in await scrape(api)}
    keywords = {"max", "absent", "or", "and", "on", "up", "job", "instance", "by", "without"}
    for rule in _rules():
        names = set(re.findall(r"[a-z_][a-z0-9_]*", re.sub(r'"[^"]*"', "", rule["expr"]))) - keywords
        assert names, rule["alert"]
        assert names <= exposed, (rule["alert"], names - exposed)


def _firing(alert: str, at: str, labels: dict[str, str], rendered: dict[str, str]) -> dict[str, Any]:
    """An alert_rule_test entry expecting `alert` to fire at `at`, with its annotations as the rules file has them
    and each template replaced by what it renders to (`rendered`)."""
    annotations = next(rule["annotations"] for rule in _rules() if rule["alert"] == alert)
    expected = {}
    for name, template in annotations.items():
        for placeholder, text in rendered.items():
            template = template.replace(placeholder, text)
        expected[name] = template
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels, "exp_annotations": expected}]}


def _quiet(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert}


def _promtool_tests() -> dict[str, Any]:
    """Series shaped like an outage and its end, minute by minute; each alert fires after its `for` and clears."""
    api = 'instance="api-1", job="events-api"'
    series = {
        "outbox_oldest_unpublished_age_seconds": "0 100 200 301 400 500 600 700 800 900 1000 0",
        "outbox_dead_letter_events": "0 0 3 3 0",
        "relay_instances": "2 2 0 0 0 0 1",
        "events_api_ready": "1 0 0 0 0 1",
        "up": "1 1 1 1 1 1",
    }
    page = {"severity": "page"}
    return {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": f"{name}{{{api}}}", "values": v} for name, v in series.items()],
                "alert_rule_test": [
                    _quiet("EventsApiOutboxBacklogStale", "7m"),  # over 300 s since 3m: pending for 5m
                    _firing("EventsApiOutboxBacklogStale", "8m", page, {"{{ $value | humanizeDuration }}": "13m 20s"}),
                    _quiet("EventsApiOutboxBacklogStale", "11m"),
                    _quiet("EventsApiDeadLetters", "1m"),
                    _firing("EventsApiDeadLetters", "2m", {"severity": "ticket"}, {"{{ $value }}": "3"}),
                    _quiet("EventsApiDeadLetters", "4m"),
                    _quiet("EventsApiRelayDown", "3m"),
                    _firing("EventsApiRelayDown", "4m", page, {}),
                    _quiet("EventsApiRelayDown", "6m"),
                    _quiet("EventsApiNotReady", "2m"),
                    _firing(
                        "EventsApiNotReady",
                        "3m",
                        {**page, "instance": "api-1", "job": "events-api"},
                        {"{{ $labels.instance }}": "api-1"},
                    ),
                    _quiet("EventsApiNotReady", "5m"),
                ],
            },
            {  # nothing reports relay_instances at all
                "interval": "1m",
                "input_series": [],
                "alert_rule_test": [_quiet("EventsApiRelayDown", "1m"), _firing("EventsApiRelayDown", "3m", page, {})],
            },
        ],
    }


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: install the Debian package `prometheus` (scripts/ensure-tools.sh does)")
    return found


def test_promtool_accepts_the_rules_and_their_unit_tests(tmp_path: Path) -> None:
    promtool = _promtool()
    checked = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump(_promtool_tests(), sort_keys=False))
    tested = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, check=False, env={**os.environ}
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
