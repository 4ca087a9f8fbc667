"""`ingest`: single-event `POST /v1/events` at 64 keep-alive connections, against the Events API and
against the naive baseline (`bench.naive`) on the same server stack.

Goal: the Events API sustains ≥ 2.5x the naive handler's events/s with p99 ≤ 25 ms and no errors.
"""

from __future__ import annotations

from bench import payloads
from bench.context import Context
from bench.env import naive_server
from bench.naive import TABLE_DDL
from bench.report import Row

CONNECTIONS = 64
NAIVE_POOL_PER_WORKER = 32  # as many connections as requests in flight: the pool never queues
GOAL_RATIO = 2.5
GOAL_P99_MS = 25.0


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def run(ctx: Context) -> list[Row]:
    # The naive baseline first, on the fresh database, while the Events API is not yet running (the
    # two pools together would not fit in max_connections = 100).
    ctx.db.execute(TABLE_DDL)
    naive = ctx.start(naive_server(ctx.db.url, ctx.log_path("naive-server"), pool_size=NAIVE_POOL_PER_WORKER))
    try:
        baseline = ctx.load(
            naive, CONNECTIONS, payloads.single_event(naive.host, naive.port, None, ctx.key_prefix("naive"))
        )
    finally:
        naive.stop()
    naive_row = Row.from_load("ingest", "naive", baseline)
    naive_row.notes.insert(
        0, f"{CONNECTIONS} conns; 1 INSERT/request, psycopg pool {NAIVE_POOL_PER_WORKER}/worker, autocommit"
    )

    api = ctx.events_api()
    ours = ctx.load(api, CONNECTIONS, payloads.single_event(api.host, api.port, ctx.api_key, ctx.key_prefix("ingest")))
    ours_row = Row.from_load("ingest", "events-api", ours)
    ours_row.notes.insert(0, f"{CONNECTIONS} conns, 1 event/request")

    ratio = (ours_row.events_per_s or 0) / naive_row.events_per_s if naive_row.events_per_s else 0.0
    p99 = ours_row.p99_ms if ours_row.p99_ms is not None else float("inf")
    checks = [
        (ratio >= GOAL_RATIO, f"≥ {GOAL_RATIO}x naive (got {ratio:.2f}x)"),
        (p99 <= GOAL_P99_MS, f"p99 ≤ {GOAL_P99_MS:.0f} ms (got {p99:.1f} ms)"),
        (ours_row.errors == 0, f"0 errors (got {ours_row.errors})"),
    ]
    ours_row.goal_met = all(ok for ok, _ in checks)
    ours_row.vs_naive = ratio
    ours_row.goal = f"≥ {GOAL_RATIO:g}x naive, p99 ≤ {GOAL_P99_MS:.0f} ms"
    naive_row.goal = "baseline"
    verdict = "met" if ours_row.goal_met else "NOT met"
    ctx.goals.append(f"- ingest: {verdict} — " + "; ".join(f"{text} {_mark(ok)}" for ok, text in checks))
    return [ours_row, naive_row]
