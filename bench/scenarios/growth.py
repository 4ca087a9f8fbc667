"""`growth`: does a full outbox slow down ingest or the relay? At each size (0, 1M and 5M rows; 0, 100k and 500k
with --quick) the outbox is refilled with a week of published history (`bench.history`), then:

1. Ingest: single events at a steady 500/s (open loop, `bench.openloop`; 32 keep-alive connections,
   UUID-shaped idempotency keys spread over the key space like real clients') through the running API;
   p50/p99/p99.9 from when each request was due to its 202.
2. Relay claim: the events ingest just added are marked published, 40,000 pending events of tenant `bench`
   over 1,000 keys are added (a burst being drained), and the bench drains them through the relay's own
   storage layer (`events_api.storage.relay.RelayStore`): `claim` on all 256 lanes with the relay's batch
   size and its per-lane depth rule, then `settle` as published (no Kafka: only the SQL is timed). The
   claim runs 12 times first, so that it is prepared and planned as in a long-running relay. Claim time =
   `RelayStore.claim`'s wall time (the statement plus building the rows), p50 and max over the drain's
   batches. The notes add 20 claims on the drained outbox (what every NOTIFY costs an idle relay) and the
   settle time.

Goal: ingest p99 and claim p50 within 20 % of the 0-row figures (≤ 1.2x) at every size.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench import history, payloads
from bench.context import Context, Timing, WindowSampler
from bench.env import Server
from bench.openloop import OpenLoopResult, percentile, run_open_loop
from bench.procstat import ProcessCpu, postgres_serving
from bench.relay_env import disturbed_note, quiet, sampler, tree
from bench.report import Row
from events_api.lanes import LANES
from events_api.settings import Settings
from events_api.storage import relay as relay_storage
from events_api.storage.relay import ClaimedEvent, RelayStore, Settlement
from relay.relay import MAX_PER_LANE, MIN_PER_LANE

SIZES_FULL = (0, 1_000_000, 5_000_000)
SIZES_QUICK = (0, 100_000, 500_000)
# A request costs the API more CPU at a steady rate than under closed-loop saturation (group commit shares less):
# ≈ 1.1 ms at 1,000/s on 2026-11-21, which with PostgreSQL and the sender made 2 cores ≈ 180 % busy, where the p99
# is mostly queueing and moves with anything else running. At 500/s they are about half busy, so the p99 shows
# what a request costs. If `machine busy` nears 200 % in these rows, the rate is too high for the machine.
RATE = 500.0
CONNECTIONS = 32
QUICK_TIMING = Timing(warmup=1.0, duration=5.0, quiet_timeout=5.0)  # 2,500 requests per window
PENDING = 40_000
# psycopg prepares a statement after 5 executions, and PostgreSQL plans the first 5 runs of a prepared statement
# for their parameters before it may switch to a generic plan: a long-running relay's claims are past both.
WARM_CLAIMS = 12
FIRST_CLAIMS = 5  # not prepared yet: planned for their parameters each time, as after every (re)connect
IDLE_CLAIMS = 20
GOAL_RATIO = 1.2


@dataclass(slots=True)
class ClaimTimes:
    first_s: list[float] = field(default_factory=list)  # the first claims after connecting (planned per call)
    claims_s: list[float] = field(default_factory=list)  # one per batch of the drain
    settles_s: list[float] = field(default_factory=list)
    idle_s: list[float] = field(default_factory=list)  # claims on the drained outbox
    claimed: int = 0
    drain_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # over the drain
    plan: str = ""  # what EXPLAIN says of the claim at the start of the drain

    def p50_ms(self, values: list[float]) -> float | None:
        return statistics.median(values) * 1000 if values else None

    def max_ms(self, values: list[float]) -> float | None:
        return max(values) * 1000 if values else None


@dataclass(slots=True)
class Step:
    size: int
    written: history.History
    ingest: Row
    claim: Row
    times: ClaimTimes


def _next_depth(per_lane: int, batch: list[ClaimedEvent], batch_size: int, lanes: int) -> int:
    """The relay's per-lane depth rule (`relay.relay.Relay._adapt_depth`): doubled while a lane fills its share,
    halved back towards an even share of the batch otherwise."""
    share = max(MIN_PER_LANE, -(-batch_size // max(1, lanes)))
    counts: dict[int, int] = {}
    for event in batch:
        counts[event.lane] = counts.get(event.lane, 0) + 1
    if counts and max(counts.values()) >= per_lane:
        return min(batch_size, MAX_PER_LANE, per_lane * 2)
    return max(share, per_lane // 2)


async def _drain(conninfo: str, batch_size: int, meter: WindowSampler) -> ClaimTimes:
    store = RelayStore(conninfo)
    await store.connect()
    lanes = list(range(LANES))
    times = ClaimTimes()
    try:
        for i in range(WARM_CLAIMS):  # read-only: the same events stay pending
            t0 = time.perf_counter()
            await store.claim(lanes, datetime.now(UTC), limit=batch_size, per_lane=MIN_PER_LANE)
            if i < FIRST_CLAIMS:
                times.first_s.append(time.perf_counter() - t0)
        times.plan = await _plan(store, lanes, batch_size)
        per_lane = MIN_PER_LANE
        # Snapshots while the store's connections are open: a backend that has exited is not in the end snapshot.
        snap0, started = meter.snapshot(), time.perf_counter()
        while True:
            t0 = time.perf_counter()
            batch = await store.claim(lanes, datetime.now(UTC), limit=batch_size, per_lane=per_lane)
            t1 = time.perf_counter()
            per_lane = _next_depth(per_lane, batch, batch_size, len(lanes))
            if not batch:
                break
            times.claims_s.append(t1 - t0)
            times.claimed += len(batch)
            settlements = [
                Settlement(e, "published", topic=f"{e.tenant_id}.{e.event_type}", partition=e.lane % 4, offset=i)
                for i, e in enumerate(batch)
            ]
            t2 = time.perf_counter()
            await store.settle(settlements, datetime.now(UTC))
            times.settles_s.append(time.perf_counter() - t2)
        times.drain_s = time.perf_counter() - started
        times.cpu = meter.usage(snap0, meter.snapshot(), times.drain_s)
        for _ in range(IDLE_CLAIMS):
            t0 = time.perf_counter()
            await store.claim(lanes, datetime.now(UTC), limit=batch_size, per_lane=per_lane)
            times.idle_s.append(time.perf_counter() - t0)
    finally:
        await store.close()
    return times


async def _plan(store: RelayStore, lanes: list[int], batch_size: int) -> str:
    """The claim's plan in a few words: its join method and the outbox partitions it reads whole. A claim that
    reads every partition sequentially costs time in proportion to the outbox, not to the batch."""
    statement = getattr(relay_storage, "_CLAIM", None)  # the storage module's own text, when it still has it
    if not isinstance(statement, str):
        return "not available"
    params = {"lanes": lanes, "now": datetime.now(UTC), "limit": batch_size, "per_lane": MIN_PER_LANE}
    row = await (await store.conn.execute("EXPLAIN (FORMAT JSON) " + statement, params)).fetchone()
    if row is None:
        return "not available"
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    joins: list[str] = []
    scanned: dict[str, float] = {}  # outbox partitions read whole, with the rows the planner expects there
    todo: list[dict[str, Any]] = [document[0]["Plan"]]
    while todo:
        node = todo.pop()
        kind = str(node.get("Node Type", ""))
        if kind in ("Hash Join", "Merge Join"):
            joins.append(kind)
        if kind == "Seq Scan" and str(node.get("Relation Name", "")).startswith("outbox_p"):
            scanned[str(node["Relation Name"])] = float(node.get("Plan Rows", 0))
        todo.extend(node.get("Plans", []))
    how = " + ".join(sorted(set(joins))) if joins else "nested loops only"
    rows = sum(scanned.values())
    # The planner puts a Seq Scan on an empty partition (the days ahead), which costs nothing.
    whole = f"Seq Scan of ≈{rows:,.0f} outbox rows" if rows >= 1000 else "no Seq Scan of outbox rows"
    return f"{how}, {whole}"


def _ingest(ctx: Context, api: Server, conn: psycopg.Connection[Any], size: int, timing: Timing) -> Row:
    meter = sampler(ctx, conn, {"api": tree(api)})
    result: OpenLoopResult | None = None
    for attempt in (1, 2):
        quiet(ctx, timing.quiet_timeout)
        make = payloads.single_event_uuid_keys(api.host, api.port, ctx.api_key, secrets.randbits(62))
        result = run_open_loop(
            api.host,
            api.port,
            make,
            rate=RATE,
            warmup=timing.warmup,
            duration=timing.duration,
            connections=CONNECTIONS,
            sampler=meter,
        )
        if attempt == 2 or disturbed_note(result.cpu) is None:
            break
        print(f"bench: growth ingest at {size:,} rows was disturbed; once more", file=sys.stderr)
    assert result is not None
    latencies = result.window_latencies_ms()
    rejected = sum(1 for i in result.window() if result.status[i] != 202)
    row = Row(
        "growth",
        f"ingest, {size:,} rows",
        events_per_s=len(latencies) / result.window_s if result.window_s else None,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        p999_ms=percentile(latencies, 99.9),
        errors=rejected,
        loadgen_cpu_pct=result.loadgen_cpu_pct,
        cpu=dict(result.cpu),
    )
    row.notes.append(
        f"{RATE:,.0f} events/s open loop, {CONNECTIONS} conns, UUID keys; {result.window_s:.1f}s window after "
        f"{timing.warmup:g}s warm-up; latency from when each request was due; {result.late} sent > 5 ms late"
    )
    if row.events_per_s:
        for key, unit in (("pg xact/s", "PG transactions"), ("pg WAL kB/s", "kB WAL")):
            if key in row.cpu:
                row.notes.append(f"≈{row.cpu[key] / row.events_per_s:.1f} {unit}/request")
    if note := disturbed_note(row.cpu):
        row.notes.append(note)
    return row


def _claim(ctx: Context, conn: psycopg.Connection[Any], size: int, salt: str, timing: Timing) -> tuple[Row, ClaimTimes]:
    history.publish_pending(conn)
    history.add_pending(conn, PENDING, salt=salt)
    batch_size = Settings.from_env().relay_batch_size
    quiet(ctx, timing.quiet_timeout)
    me = os.getpid()  # the bench process plays the relay here
    meter = WindowSampler(ProcessCpu({"relay": lambda _: [me], "postgres": postgres_serving(ctx.db.name)}), conn)
    times = asyncio.run(_drain(ctx.db.url, batch_size, meter))
    cpu = times.cpu
    row = Row(
        "growth",
        f"relay claim, {size:,} rows",
        p50_ms=times.p50_ms(times.claims_s),
        p99_ms=times.max_ms(times.claims_s),
        errors=PENDING - times.claimed,
        cpu=cpu,
    )
    drain_rate = times.claimed / times.drain_s if times.drain_s else 0.0
    row.notes += [
        f"{PENDING:,} pending over {history.PENDING_KEYS:,} keys; {len(times.claims_s)} claims of ≤ "
        f"{batch_size:,} on {LANES} lanes (p50 / max in the p50 / p99 columns)",
        f"settle p50 {_ms(times.p50_ms(times.settles_s))} ms; claim + settle without Kafka {drain_rate:,.0f} ev/s",
        f"the first {FIRST_CLAIMS} claims after connecting (not yet prepared) p50 "
        f"{_ms(times.p50_ms(times.first_s))} ms",
        f"claim plan (EXPLAIN, per-lane depth {MIN_PER_LANE}): {times.plan}",
        f"idle claim (drained outbox, not vacuumed) p50 {_ms(times.p50_ms(times.idle_s))} / max "
        f"{_ms(times.max_ms(times.idle_s))} ms",
    ]
    if note := disturbed_note(cpu):
        row.notes.append(note)
    return row, times


def _sizes(sizes: tuple[int, ...]) -> str:
    return " / ".join(f"{size:,}" for size in sizes)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def run(ctx: Context) -> list[Row]:
    api = ctx.events_api()
    sizes = ctx.growth_sizes or (SIZES_QUICK if ctx.quick else SIZES_FULL)
    timing = QUICK_TIMING if ctx.quick else ctx.timing
    steps: list[Step] = []
    with psycopg.connect(ctx.db.url, autocommit=True) as conn:
        for size in sizes:
            salt = f"{ctx.run_id}-{size}-"
            print(f"bench: growth: writing {size:,} rows of history", file=sys.stderr)
            written = history.fill(ctx.db.url, size, salt=salt)
            ingest = _ingest(ctx, api, conn, size, timing)
            ingest.notes.insert(
                0,
                f"outbox {written.outbox_mb:,.0f} MB over {written.partitions} partitions, "
                f"{written.idempotency_keys:,} idempotency keys ({written.keys_mb:,.0f} MB), "
                f"written + vacuumed in {written.seconds:.1f}s",
            )
            claim, times = _claim(ctx, conn, size, salt + "pending-", timing)
            steps.append(Step(size, written, ingest, claim, times))
        # Leave an empty outbox behind: the database is dropped at the end, but a scenario after this one
        # should not inherit gigabytes.
        conn.execute("TRUNCATE outbox, dead_letters, idempotency_keys")

    base = steps[0]
    verdicts: list[tuple[bool | None, str]] = []
    for step in steps:
        if step is base:
            for row in (step.ingest, step.claim):
                row.goal = f"baseline ({base.size:,} rows)"
            continue
        pairs = [
            (step.ingest, base.ingest, step.ingest.p99_ms, base.ingest.p99_ms, "p99"),
            (step.claim, base.claim, step.claim.p50_ms, base.claim.p50_ms, "claim p50"),
        ]
        for row, ref_row, value, ref, what in pairs:
            ratio = _ratio(value, ref)
            shown = "-" if ratio is None else f"{ratio:.2f}x"
            row.goal = f"{what} ≤ {GOAL_RATIO:g}x {base.size:,} rows ({shown})"
            # A ratio to or of a disturbed window says nothing either way (a slow baseline makes any size look
            # flat): judged only when both windows were quiet.
            if disturbed_note(row.cpu) or disturbed_note(ref_row.cpu):
                row.goal += ": not judged, DISTURBED"
                verdicts.append((None, f"{what} at {step.size:,} rows {shown} (disturbed)"))
                continue
            ok = ratio is not None and ratio <= GOAL_RATIO and row.errors == 0
            row.goal_met = ok
            verdicts.append((ok, f"{what} at {step.size:,} rows {shown}"))

    judged = [ok for ok, _ in verdicts if ok is not None]
    verdict = "NOT met" if not all(judged) else "met" if len(judged) == len(verdicts) else "not judged (disturbed)"
    quick = f" (quick sizes {_sizes(SIZES_QUICK)} instead of {_sizes(SIZES_FULL)})" if sizes == SIZES_QUICK else ""
    marks = {True: "✓", False: "✗", None: "?"}
    ctx.goals.append(
        f"- growth{quick}: {verdict} — flat within 20 % (≤ {GOAL_RATIO:g}x the {base.size:,}-row figure): "
        + "; ".join(f"{text} {marks[ok]}" for ok, text in verdicts)
    )
    ctx.sections.append(_summary(steps, quick))
    return [row for step in steps for row in (step.ingest, step.claim)]


def _summary(steps: list[Step], quick: str) -> list[str]:
    base = steps[0]
    out = [
        f"Growth{quick}: the same load with a week of published history in the outbox (`bench/history.py`); "
        f"ingest at {RATE:,.0f} events/s, claim = `RelayStore.claim` of ≤ 2,000 of {PENDING:,} pending events; "
        f"goal ≤ {GOAL_RATIO:g}x the {base.size:,}-row figure.",
        "",
        "| outbox rows | outbox MB | idempotency keys | ingest p50 / p99 / p99.9 ms | p99 vs base | "
        "claim p50 / max ms | claim vs base | first claims p50 ms | idle claim p50 ms | settle p50 ms | claim plan |",
        "|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for step in steps:
        ingest_ratio = _ratio(step.ingest.p99_ms, base.ingest.p99_ms)
        claim_ratio = _ratio(step.claim.p50_ms, base.claim.p50_ms)
        t = step.times
        out.append(
            f"| {step.size:,} | {step.written.outbox_mb:,.0f} | {step.written.idempotency_keys:,} | "
            f"{_ms(step.ingest.p50_ms)} / {_ms(step.ingest.p99_ms)} / {_ms(step.ingest.p999_ms)} | "
            f"{'-' if ingest_ratio is None else f'{ingest_ratio:.2f}x'} | "
            f"{_ms(t.p50_ms(t.claims_s))} / {_ms(t.max_ms(t.claims_s))} | "
            f"{'-' if claim_ratio is None else f'{claim_ratio:.2f}x'} | {_ms(t.p50_ms(t.first_s))} | "
            f"{_ms(t.p50_ms(t.idle_s))} | {_ms(t.p50_ms(t.settles_s))} | {t.plan} |"
        )
    return out
