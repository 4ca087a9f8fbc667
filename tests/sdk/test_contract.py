"""The client against the committed OpenAPI document: its response models carry the documented fields,
its request bodies are valid against the documented schemas, and it calls only documented operations."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import jsonschema_rs
import pytest
import yaml
from events_api_client import (
    DeadLetter,
    Event,
    EventsApiError,
    EventStatus,
    FieldError,
    KafkaCoordinates,
    PublishResult,
    SchemaRegistered,
    calls,
)
from events_api_client.calls import Call
from events_api_client.models import EventState

OPENAPI: dict[str, Any] = yaml.safe_load((Path(__file__).resolve().parents[2] / "openapi.yaml").read_text())
COMPONENTS: dict[str, Any] = OPENAPI["components"]["schemas"]


def documented(component: str) -> set[str]:
    return set(COMPONENTS[component]["properties"])


def fields(model: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(model)}


@pytest.mark.parametrize(
    ("model", "component", "extra"),
    [
        # What the SDK adds to an accepted event: what it knows from the call and the headers.
        (PublishResult, "EventAccepted", {"idempotency_key", "replayed", "location"}),
        (EventStatus, "EventStatus", set()),
        (KafkaCoordinates, "KafkaCoordinates", set()),
        (DeadLetter, "DeadLetterOut", set()),
        (SchemaRegistered, "SchemaRegistered", {"created"}),
        (FieldError, "ProblemError", set()),
        (Event, "EventIn", set()),
    ],
)
def test_models_carry_the_documented_fields(model: type[Any], component: str, extra: set[str]) -> None:
    assert fields(model) == documented(component) | extra


def test_errors_carry_the_problem_members() -> None:
    error = EventsApiError(422, "t", "title", "detail", [])
    assert all(hasattr(error, member) for member in documented("Problem"))


def test_the_event_states_match() -> None:
    assert set(get_args(EventState)) == set(COMPONENTS["EventStatus"]["properties"]["status"]["enum"])
    assert set(COMPONENTS["EventAccepted"]["properties"]["status"]["enum"]) == {"accepted"}


def validator(component: str) -> Any:
    schema = {"$ref": f"#/components/schemas/{component}", "components": OPENAPI["components"]}
    return jsonschema_rs.validator_for(schema, validate_formats=True)


FULL_EVENT = Event(
    "order.created",
    {"order_id": "o-1", "amount": 1},
    partition_key="c-1",
    schema_version=2,
    headers={"source-app": "checkout"},
    occurred_at=datetime(2026, 11, 20, 10, 0, tzinfo=UTC),
)


@pytest.mark.parametrize(
    ("call", "component"),
    [
        (calls.publish(FULL_EVENT, "k"), "EventIn"),
        (calls.publish(Event("order.created", {}), "k"), "EventIn"),
        (calls.publish_batch([FULL_EVENT, Event("order.created", {})], "k"), "BatchIn"),
        (calls.register_schema("order.created", {"type": "object"}), "SchemaIn"),
        (calls.redrive_all("order.created"), "RedriveIn"),
        (calls.redrive_all(None), "RedriveIn"),
    ],
)
def test_request_bodies_are_valid_against_the_documented_schemas(call: Call[Any], component: str) -> None:
    assert call.body is not None
    validator(component).validate(json.loads(call.body))


def test_naive_timestamps_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="time zone"):
        calls.publish(Event("order.created", {}, occurred_at=datetime(2026, 1, 1)), "k")


ALL_CALLS: list[Call[Any]] = [
    calls.publish(FULL_EVENT, "k"),
    calls.publish_batch([FULL_EVENT], "k"),
    calls.get_event("evt_1"),
    calls.check_landed("k"),
    calls.register_schema("order.created", {}),
    calls.dead_letter_page("order.created", 10, "cursor"),
    calls.redrive("evt_1"),
    calls.redrive_all(None),
    calls.resend("/v1/events", b"{}", "k", None),
]


@pytest.mark.parametrize("call", ALL_CALLS, ids=lambda c: f"{c.method} {c.path}")
def test_every_call_is_a_documented_operation(call: Call[Any]) -> None:
    operations = {
        (method.upper(), re.sub(r"\{[^}]+\}", "[^/]+", path))
        for path, item in OPENAPI["paths"].items()
        for method in item
    }
    assert any(call.method == method and re.fullmatch(path, call.path) for method, path in operations)
    operation = next(
        item[call.method.lower()]
        for path, item in OPENAPI["paths"].items()
        if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", path), call.path) and call.method.lower() in item
    )
    parameters = {p["name"]: p for p in operation.get("parameters", [])}
    if "Idempotency-Key" in parameters:
        assert call.idempotency_key is not None
    assert set(call.params or {}) <= {name for name, p in parameters.items() if p["in"] == "query"}
