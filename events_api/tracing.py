"""OpenTelemetry spans, only when asked for: with the `otel` extra installed and an OTLP endpoint configured
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, the standard variables, as are
`OTEL_SERVICE_NAME` and `OTEL_BSP_*`), the API makes one server span per request, a child of the request's
`traceparent`, and each relay one span per published batch, linked to the traces of its events. Otherwise
`tracing()` is None and nothing of OpenTelemetry is imported: no cost on the hot path.

Spans go out over OTLP/HTTP from a background thread (the SDK's batch processor); an unreachable collector
costs dropped spans, never a request."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("events_api.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
MAX_LINKS = 128  # a batch links to at most this many of its events' traces


class Tracing:
    """A tracer provider exporting over OTLP/HTTP."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from events_api import __version__

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("events_api", __version__)
        self.propagator = TraceContextTextMapPropagator()

    @contextmanager
    def server_span(self, method: str, traceparent: str | None) -> Iterator[Any]:
        """A SERVER span for one HTTP request; name it and set its status with `finish_request`."""
        from opentelemetry.trace import SpanKind

        parent = self.propagator.extract({"traceparent": traceparent}) if traceparent else None
        with self.tracer.start_as_current_span(method, context=parent, kind=SpanKind.SERVER) as span:
            yield span

    @staticmethod
    def finish_request(span: Any, method: str, route: str, status: int) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.update_name(f"{method} {route}")
        span.set_attribute("http.request.method", method)
        span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))

    @contextmanager
    def batch_span(self, size: int, traceparents: Sequence[str | None]) -> Iterator[Any]:
        """A PRODUCER span for one relay batch, linked to the traces its events were accepted in."""
        from opentelemetry.trace import Link, SpanKind, get_current_span

        links: list[Any] = []
        for traceparent in traceparents:
            if traceparent and len(links) < MAX_LINKS:
                context = get_current_span(self.propagator.extract({"traceparent": traceparent})).get_span_context()
                if context.is_valid:
                    links.append(Link(context))
        attributes = {"messaging.system": "kafka", "messaging.operation.type": "publish"}
        with self.tracer.start_as_current_span(
            "relay publish", kind=SpanKind.PRODUCER, links=links, attributes=attributes
        ) as span:
            span.set_attribute("messaging.batch.message_count", size)
            yield span

    def shutdown(self) -> None:
        """Flush what is buffered (bounded by the SDK's export timeout)."""
        self.provider.shutdown()


def tracing(service_name: str) -> Tracing | None:
    """Tracing when an OTLP endpoint is configured and the `otel` extra is installed, else None."""
    if not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return None
    try:
        return Tracing(service_name)
    except ImportError:
        log.warning("an OTLP endpoint is set but OpenTelemetry is not installed (pip install 'events-api[otel]')")
        return None
