"""Dead letters through the client: listed page by page, redriven one by one or all at once. Real dead
letters need a real relay, so this module runs its own database, server, Kafka-wire broker and
`events-api relay` (a relay on the shared database would publish the other tests' events). The tenant's
routing first names a Kafka cluster the relay does not know: a permanent failure, dead-lettered on the
first attempt; routed back to the real broker, the redriven events are published."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from events_api_client import AsyncEventsClient, DeadLetter, EventsClient, NotFoundError

from tests.conftest import ADMIN, fresh_database, serving
from tests.sdk.conftest import FAST, Opener, Tenant, Threaded, create_tenant, eventually, order
from tests.support.kafka import running_broker


@contextmanager
def relay(database_url: str, bootstrap: str) -> Iterator[None]:
    """`events-api relay` as a subprocess; SIGTERM makes it finish its batch and exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")}
    env |= {"EVENTS_API_DATABASE_URL": database_url, "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    process = subprocess.Popen(
        [sys.executable, "-m", "events_api", "relay"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def relayed_server() -> Iterator[str]:
    """A server, a broker and a relay of their own, on a database of their own."""
    with (
        fresh_database("events_api_sdk_dead_letters") as database_url,
        running_broker() as broker,
        relay(database_url, broker.bootstrap),
        serving(database_url, workers=1) as base,
    ):
        yield base


def route(base: str, tenant: Tenant, cluster: str) -> None:
    with httpx.Client(base_url=base, headers=ADMIN) as http:
        assert http.put(f"/v1/tenants/{tenant.id}/routing", json={"cluster": cluster}).status_code == 200


async def all_dead_letters(client: AsyncEventsClient | Threaded, page_size: int) -> list[DeadLetter]:
    if isinstance(client, Threaded):
        sync_client: EventsClient = client.client
        return await asyncio.to_thread(lambda: list(sync_client.dead_letters(page_size=page_size)))
    return [dead async for dead in client.dead_letters(page_size=page_size)]


async def test_dead_letters_are_paged_and_redriven(relayed_server: str, open_client: Opener) -> None:
    tenant = create_tenant(relayed_server)
    route(relayed_server, tenant, "nowhere")
    async with open_client(relayed_server, tenant.key, retry=FAST) as client:
        published = [await client.publish("order.created", order(n), partition_key="c-1") for n in range(3)]
        ids = [p.event_id for p in published if p.event_id is not None]

        async def all_dead() -> bool:
            return {(await client.get_event(i)).status for i in ids} == {"dead_lettered"}

        await eventually(all_dead, timeout=20)
        dead = await all_dead_letters(client, page_size=2)  # two pages, through the cursor
        assert [d.event_id for d in dead] == ids
        assert "UNKNOWN_CLUSTER" in dead[0].last_error
        assert (dead[0].event_type, dead[0].partition_key, dead[0].attempts) == ("order.created", "c-1", 1)
        assert dead[0].dead_lettered_at >= dead[0].received_at
        assert "UNKNOWN_CLUSTER" in ((await client.get_event(ids[0])).last_error or "")

        route(relayed_server, tenant, "default")  # the cause, fixed
        await client.redrive(ids[0])
        with pytest.raises(NotFoundError):  # no longer a dead letter
            await client.redrive(ids[0])
        assert await client.redrive_all(event_type="order.created") == 2
        assert await all_dead_letters(client, page_size=2) == []

        async def all_published() -> bool:
            return {(await client.get_event(i)).status for i in ids} == {"published"}

        await eventually(all_published, timeout=20)
        status = await client.get_event(ids[0])
        assert status.kafka is not None
        assert status.kafka.topic == f"{tenant.id}.order.created"
        assert status.published_at is not None
