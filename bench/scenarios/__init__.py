"""The scenarios, by name, in the order `python -m bench` runs them.

A scenario is a function `run(ctx: Context) -> list[Row]`; it may read the rows of the scenarios
before it from `ctx.rows`, add goal lines to `ctx.goals` and Markdown blocks to `ctx.sections`. To add
one, write a module here with a `run` function and list it below.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.context import Context
from bench.report import Row
from bench.scenarios import batch, growth, ingest, latency, relay, validate

Scenario = Callable[[Context], list[Row]]

SCENARIOS: dict[str, Scenario] = {
    "ingest": ingest.run,
    "batch": batch.run,
    "validate": validate.run,
    "relay": relay.run,
    "latency": latency.run,
    "growth": growth.run,
}
