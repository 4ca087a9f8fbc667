"""OpenTelemetry: with an OTLP endpoint set, the API's request spans continue the caller's traceparent and
each relay batch is a span linked to its events' traces, received by a real OTLP/HTTP endpoint; without
one, nothing is traced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from events_api.tracing import tracing
from tests.integration.test_relay import kafka_broker, relay_db, stack  # noqa: F401
from tests.support.kafka import Broker
from tests.support.relays import relay_running

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Collector(ThreadingHTTPServer):
    """The receiving end of OTLP/HTTP (protobuf): keeps every span it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    def wait_for(self, predicate: Any, timeout: float = 15.0) -> Span:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [s for s in self.spans if predicate(s)]
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no such span among {[s.name for s in self.spans]}")


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.spans += [
                span for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans
            ]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


async def test_requests_and_relay_batches_are_traced(relay_db: str, kafka_broker: Broker, collector: Collector) -> None:  # noqa: F811
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    async with stack(relay_db) as s, relay_running(relay_db, {"default": kafka_broker.bootstrap}):
        response = await s.api.post(
            "/v1/events",
            json={"event_type": "order.created", "payload": {"n": 1}, "partition_key": "k"},
            headers={**s.tenant.auth, "Idempotency-Key": "traced", "traceparent": traceparent},
        )
        assert response.status_code == 202, response.text
        event_id = response.json()["event_id"]
        await s.drained()
    request = collector.wait_for(lambda span: span.name == "POST /v1/events")
    assert request.trace_id.hex() == TRACE_ID
    assert request.parent_span_id.hex() == PARENT_ID
    assert request.kind == Span.SPAN_KIND_SERVER
    attributes = {a.key: a.value for a in request.attributes}
    assert attributes["http.response.status_code"].int_value == 202
    assert attributes["http.route"].string_value == "/v1/events"
    batch = collector.wait_for(
        lambda span: span.name == "relay publish" and any(link.trace_id.hex() == TRACE_ID for link in span.links)
    )
    assert batch.kind == Span.SPAN_KIND_PRODUCER
    assert {a.key: a.value for a in batch.attributes}["messaging.batch.message_count"].int_value >= 1
    assert event_id.startswith("evt_")


def test_without_an_endpoint_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing("events-api") is None
