"""`batch`: `POST /v1/events/batch` with 100 events per request at 16 keep-alive connections.

Goal: ≥ 50,000 events/s (events/s = 100 x accepted requests/s).
"""

from __future__ import annotations

from bench import payloads
from bench.context import Context
from bench.report import Row

CONNECTIONS = 16
BATCH_SIZE = 100
GOAL_EVENTS_PER_S = 50_000


def run(ctx: Context) -> list[Row]:
    api = ctx.events_api()
    make = payloads.batch(api.host, api.port, ctx.api_key, ctx.key_prefix("batch"), BATCH_SIZE)
    result = ctx.load(api, CONNECTIONS, make)
    row = Row.from_load("batch", "events-api", result, events_per_request=BATCH_SIZE)
    rate = row.events_per_s or 0.0
    row.goal_met = rate >= GOAL_EVENTS_PER_S and row.errors == 0
    verdict = "met" if row.goal_met else "NOT met"
    row.goal = f"≥ {GOAL_EVENTS_PER_S:,} events/s"
    row.notes.insert(0, f"{CONNECTIONS} conns, {BATCH_SIZE} events/request, {result.requests_per_s:,.0f} requests/s")
    rate_mark = "✓" if rate >= GOAL_EVENTS_PER_S else "✗"
    errors_mark = "✓" if row.errors == 0 else "✗"
    ctx.goals.append(
        f"- batch: {verdict} — ≥ {GOAL_EVENTS_PER_S:,} events/s (got {rate:,.0f}) {rate_mark}; "
        f"0 errors (got {row.errors}) {errors_mark}"
    )
    return [row]
