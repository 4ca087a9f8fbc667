"""`validate`: the cost of schema validation.

1. In process: validations per second of realistic payloads against a 15-field schema through the same
   path ingest uses (`events_api.schemas.compile_schema` + `violations`). Goal ≥ 100,000/s.
2. Over HTTP: single-event ingest of the same 15-field payloads, once against that schema and once
   against an open schema (`{"type": "object"}`), i.e. validation on and (practically) off. Goal: on
   costs at most 10 % of the events/s.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.context import Context
from bench.env import BenchError, request
from bench.loadgen import RequestFactory
from bench.report import Row
from events_api.schemas import compile_schema, violations

CONNECTIONS = 64
GOAL_VALIDATIONS = 100_000
GOAL_MAX_DROP = 0.10

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "minLength": 1, "maxLength": 64},
        "customer_id": {"type": "string", "pattern": "^c-[0-9]+$"},
        "email": {"type": "string", "maxLength": 254},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP", "CHF"]},
        "total_cents": {"type": "integer", "minimum": 0},
        "tax_cents": {"type": "integer", "minimum": 0},
        "discount_cents": {"type": "integer", "minimum": 0},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 100,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price_cents": {"type": "integer", "minimum": 0},
                },
                "required": ["sku", "quantity", "unit_price_cents"],
            },
        },
        "shipping": {
            "type": "object",
            "properties": {
                "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
                "postcode": {"type": "string"},
                "express": {"type": "boolean"},
            },
            "required": ["country"],
        },
        "gift": {"type": "boolean"},
        "coupon": {"type": ["string", "null"]},
        "channel": {"type": "string", "enum": ["web", "ios", "android", "store"]},
        "placed_at": {"type": "string"},
        "notes": {"type": "string", "maxLength": 500},
        "loyalty_points": {"type": "integer", "minimum": 0},
    },
    "required": ["order_id", "customer_id", "currency", "total_cents", "items", "shipping"],
    "additionalProperties": False,
}


def payload(n: int) -> dict[str, Any]:
    return {
        "order_id": f"o-{n}",
        "customer_id": f"c-{n % 997}",
        "email": f"user{n % 997}@example.com",
        "currency": "EUR",
        "total_cents": 2598 + n % 100,
        "tax_cents": 415,
        "discount_cents": 0,
        "items": [{"sku": "mug-blue", "quantity": 2, "unit_price_cents": 1299}],
        "shipping": {"country": "DE", "postcode": "10115", "express": n % 2 == 0},
        "gift": False,
        "coupon": None,
        "channel": "web",
        "placed_at": "2026-11-21T08:00:00Z",
        "notes": "leave at the door",
        "loyalty_points": n % 50,
    }


def validations_per_second(seconds: float) -> float:
    validator = compile_schema(SCHEMA)
    payloads = [payload(n) for n in range(1000)]
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for item in payloads:
            if next(violations(validator, item, "/payload", 50), None) is not None:
                raise BenchError("a benchmark payload does not match its schema")
        done += len(payloads)
    return done / (time.perf_counter() - started)


def _requests(host: str, port: int, api_key: str, key_prefix: str, event_type: str) -> RequestFactory:
    template = json.dumps({"event_type": event_type, "payload": payload(0), "partition_key": "o-0"})
    head = (
        f"POST /v1/events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nIdempotency-Key: {key_prefix}-"
    ).encode()
    before, after = template.encode().split(b'"o-0"', 1)  # the first "o-0" is order_id

    def make(n: int) -> bytes:
        body = before + b'"o-%d"' % n + after
        return b"%b%d\r\nContent-Length: %d\r\n\r\n%b" % (head, n, len(body), body)

    return make


def run(ctx: Context) -> list[Row]:
    rate = validations_per_second(1.0 if ctx.quick else 3.0)
    in_process = Row("validate", "in-process", events_per_s=rate, goal_met=rate >= GOAL_VALIDATIONS)
    in_process.notes.append("15-field schema, validations/s on one core")
    in_process.goal = f"≥ {GOAL_VALIDATIONS:,} validations/s"

    api = ctx.events_api()
    for event_type, schema in (("bench.validated", SCHEMA), ("bench.open", {"type": "object"})):
        status, answer = request(
            api.host, api.port, "POST", f"/v1/schemas/{event_type}/versions", {"schema": schema}, ctx.api_key
        )
        if status not in (200, 201):
            raise BenchError(f"registering {event_type} answered {status}: {answer}")
    rows = []
    for event_type, label in (("bench.validated", "validation on"), ("bench.open", "validation off")):
        make = _requests(api.host, api.port, ctx.api_key, ctx.key_prefix(event_type), event_type)
        row = Row.from_load("validate", f"ingest, {label}", ctx.load(api, CONNECTIONS, make))
        row.notes.insert(0, f"{CONNECTIONS} conns, 15-field payload, schema {event_type}")
        rows.append(row)
    on, off = rows[0].events_per_s or 0.0, rows[1].events_per_s or 0.0
    drop = 1 - on / off if off else 1.0
    rows[0].goal_met = drop <= GOAL_MAX_DROP
    rows[0].goal = f"≤ {GOAL_MAX_DROP:.0%} below validation off ({drop:.1%})"
    rows[1].goal = "baseline"
    rows[0].notes.append(f"{drop:.1%} below validation off")
    verdict = "met" if in_process.goal_met and rows[0].goal_met else "NOT met"
    ctx.goals.append(
        f"- validate: {verdict} — {rate:,.0f} validations/s (goal ≥ {GOAL_VALIDATIONS:,}) "
        f"{'✓' if in_process.goal_met else '✗'}; ingest with validation {drop:.1%} slower (goal ≤ 10%) "
        f"{'✓' if rows[0].goal_met else '✗'}"
    )
    return [in_process, *rows]
