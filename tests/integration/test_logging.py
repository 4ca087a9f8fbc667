"""Structured logs: one JSON line per request (and per relay batch worth a look, maintenance run, error), an
X-Request-Id on every response, and nothing secret on any line. Read from the real processes' stderr."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from events_api.logs import JsonFormatter, TextFormatter, current_request_id, fields
from tests.conftest import ADMIN, ADMIN_TOKEN, ALL_SCOPES, ORDER_SCHEMA, free_port, fresh_database, idem, serving


def _environment(database_url: str, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")},
        "EVENTS_API_DATABASE_URL": database_url,
        **extra,
    }


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line the workers wrote. uvicorn's supervisor process logs a few lines of its own before any of our
    code runs (`INFO:     Started parent process`); those are the only ones allowed not to be JSON."""
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
        else:
            assert re.match(
                r"INFO:\s+(Uvicorn running|Started parent|Received SIGTERM|Terminated child|Waiting for "
                r"child|Stopping parent)",
                line,
            ), line
    return lines


def test_a_real_server_logs_one_json_line_per_request_and_no_secret(tmp_path: Path, database_url: str) -> None:
    log = tmp_path / "serve.log"
    marker = "payload-marker-" + secrets.token_hex(6)
    with serving(database_url, log=log) as base, httpx.Client(base_url=base) as http:
        tenant = "lg-" + secrets.token_hex(4)
        created = http.post("/v1/tenants", json={"id": tenant}, headers={**ADMIN, "X-Request-Id": "req-test-1"})
        assert created.status_code == 201
        assert created.headers["x-request-id"] == "req-test-1"
        key = http.post(f"/v1/tenants/{tenant}/api-keys", json={"scopes": ALL_SCOPES}, headers=ADMIN).json()
        auth = {"Authorization": f"Bearer {key['key']}"}
        assert http.post("/v1/schemas/order.created/versions", json={"schema": ORDER_SCHEMA}, headers=auth).is_success
        body = {"event_type": "order.created", "payload": {"order_id": marker, "amount": 1}}
        published = http.post("/v1/events", json=body, headers={**auth, "Idempotency-Key": marker})
        assert published.status_code == 202
        publish_id = published.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{16}", publish_id)  # generated
        smuggled = http.get("/healthz", headers={"X-Request-Id": "two words"})
        assert re.fullmatch(r"[0-9a-f]{16}", smuggled.headers["x-request-id"])  # not plain: replaced
        too_long = http.get("/healthz", headers={"X-Request-Id": "x" * 129})
        assert too_long.headers["x-request-id"] != "x" * 129
        missing = http.get("/v1/nothing", headers={"X-Request-Id": "req-test-404"})
        assert (missing.status_code, missing.headers["x-request-id"]) == (404, "req-test-404")
        refused = http.post("/v1/events", json=body, headers={"Authorization": "Bearer evk_x_" + "0" * 64, **idem()})
        assert refused.status_code == 401
        assert refused.headers["x-request-id"]
    text = log.read_text()
    lines = json_lines(text)
    assert {"ts", "level", "logger", "msg"} <= set(lines[0])
    requests = {line["request_id"]: line for line in lines if line["logger"] == "events_api.access"}

    admin_line = requests["req-test-1"]
    assert admin_line["method"] == "POST"
    assert admin_line["route"] == "/v1/tenants"
    assert admin_line["status"] == 201
    assert admin_line["caller"] == "admin"
    assert isinstance(admin_line["duration_ms"], float)
    publish = requests[publish_id]
    assert (publish["route"], publish["status"], publish["tenant"], publish["events"]) == ("/v1/events", 202, tenant, 1)
    assert publish["key_id"] == key["id"]
    assert publish["event_id"] == published.json()["event_id"]
    assert requests["req-test-404"]["route"] == "unmatched"
    assert requests[refused.headers["x-request-id"]]["status"] == 401
    for needle in (ADMIN_TOKEN, key["key"], key["key"].rsplit("_", 1)[1], marker, "0" * 64):
        assert needle not in text, f"{needle[:12]}… appears in the logs"


def test_a_stderr_nobody_reads_does_not_stall_the_server(database_url: str) -> None:
    """A pipe holds ≈64 KB: 3,000 access lines would fill it many times over. Requests must not wait on it."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "events_api", "serve", "--port", str(port), "--workers", "1"],
        env=_environment(database_url, EVENTS_API_ADMIN_TOKEN=ADMIN_TOKEN),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,  # and never read until the end
        start_new_session=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start"
                    time.sleep(0.1)
            started = time.monotonic()
            statuses = {http.get("/healthz", headers={"X-Request-Id": f"r{i}"}).status_code for i in range(3000)}
            assert statuses == {200}
            assert time.monotonic() - started < 60
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    lines = json_lines(stderr.decode())
    assert sum(1 for line in lines if line.get("msg") == "request") > 0


def test_text_format_for_people(tmp_path: Path, database_url: str) -> None:
    log = tmp_path / "serve.log"
    with serving(database_url, log=log, log_format="text") as base:
        assert httpx.get(f"{base}/healthz", headers={"X-Request-Id": "plain-1"}).status_code == 200
    line = next(line for line in log.read_text().splitlines() if "plain-1" in line)
    assert not line.startswith("{")
    assert " INFO events_api.access request " in line
    assert "route=/healthz" in line
    assert "status=200" in line


def test_an_unknown_log_format_is_a_configuration_error(database_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "events_api", "relay"],
        env=_environment(database_url, EVENTS_API_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9", EVENTS_API_LOG_FORMAT="yaml"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "events-api: configuration error: EVENTS_API_LOG_FORMAT: must be json or text"


def test_the_relay_logs_json_its_lanes_failing_batches_and_its_stop(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    with fresh_database("events_api_logging") as db_url:
        with psycopg.connect(db_url, autocommit=True) as sql:
            # A tenant routed to a cluster no relay knows: its events are dead-lettered at the first attempt.
            sql.execute("INSERT INTO tenants (id, created_at) VALUES ('lost', now())")
            sql.execute(
                "INSERT INTO tenant_routing (tenant_id, topic_template, dead_letter_topic, topics, cluster, updated_at)"
                " VALUES ('lost', '{tenant}.{event_type}', '{tenant}.dead-letter', '{}', 'nowhere', now())"
            )
            sql.execute(
                "INSERT INTO outbox (received_at, event_id, tenant_id, event_type, schema_version, lane,"
                " idempotency_key, payload, next_attempt_at) SELECT now(), 'evt_' || n, 'lost', 'a.b', 1, n % 256,"
                " 'k' || n, '{}', now() FROM generate_series(1, 3) AS n"
            )
        with log.open("wb") as stderr:
            relay = subprocess.Popen(
                [sys.executable, "-m", "events_api", "relay"],
                env=_environment(db_url, EVENTS_API_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and '"event":"relay_batch"' not in log.read_text():
                    time.sleep(0.2)
            finally:
                relay.send_signal(signal.SIGTERM)
                assert relay.wait(30) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line, from the first: JSON
    assert any(line["msg"] == "relay connected; taking lanes" for line in lines)
    batch = next(line for line in lines if line.get("event") == "relay_batch")
    assert (batch["events"], batch["dead_lettered"], batch["published"]) == (3, 3, 0)
    assert batch["errors"] == {"UNKNOWN_CLUSTER": 3}
    assert batch["lanes"] == 256
    stopped = next(line for line in lines if line.get("event") == "relay_stopped")
    assert stopped["dead"] == 3
    assert any(line.get("event") == "maintenance_run" for line in lines)


def test_request_lines_reach_logging_when_it_is_not_ours(caplog: pytest.LogCaptureFixture) -> None:
    """Without setup_logging (an app mounted elsewhere, the tests) the access line is an ordinary record."""
    from events_api.logs import log_request

    with caplog.at_level(logging.INFO, logger="events_api.access"):
        log_request({"method": "GET", "route": "/healthz", "status": 200, "duration_ms": 0.1, "request_id": "r1"})
    record = next(r for r in caplog.records if r.name == "events_api.access")
    assert record.fields["route"] == "/healthz"  # type: ignore[attr-defined]


def test_formatters() -> None:
    record = logging.LogRecord("relay", logging.WARNING, __file__, 1, "batch of %d", (3,), None)
    record.fields = fields(events=3, errors={"X": 1})["fields"]
    token = current_request_id.set("rid-1")
    try:
        as_json = json.loads(JsonFormatter().format(record))
        as_text = TextFormatter().format(record)
    finally:
        current_request_id.reset(token)
    assert as_json["msg"] == "batch of 3"
    assert as_json["level"] == "warning"
    assert (as_json["events"], as_json["errors"], as_json["request_id"]) == (3, {"X": 1}, "rid-1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", as_json["ts"])
    assert as_text.endswith("WARNING relay batch of 3 request_id=rid-1 events=3 errors={'X': 1}")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "RuntimeError: boom" in json.loads(JsonFormatter().format(failed))["exc"]
