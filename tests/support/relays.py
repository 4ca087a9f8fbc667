"""An in-process relay for a test: started on entry, stopped gracefully (SIGTERM-like) on exit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from events_api.settings import Settings
from relay.relay import Relay

# Failures are found in seconds, not librdkafka's default minutes.
FAST_FAILURES = {"message.timeout.ms": 3000}


@asynccontextmanager
async def relay_running(
    db_url: str, clusters: str | dict[str, str], *, metrics_port: int | None = None, **producer_overrides: Any
) -> AsyncIterator[Relay]:
    """`clusters`: the `default` cluster's bootstrap servers, or every named cluster (with `default`)."""
    named = {"default": clusters} if isinstance(clusters, str) else dict(clusters)
    default = named.pop("default")
    settings = Settings(database_url=db_url, kafka_bootstrap_servers=default, kafka_clusters=named)
    relay = Relay(settings, producer_overrides={**FAST_FAILURES, **producer_overrides}, metrics_port=metrics_port)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        yield relay
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
