"""Telling every API replica that an event type has a new schema version, over Redis pub/sub.

Each process subscribes to one channel and, on a message, drops its cached "latest version" of that
(tenant, type). Redis may be down or unset: then `receiving` is False, the registry keeps cached
entries only for a second, and ingest goes on. After a (re)subscription the whole cache is dropped,
since messages may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import redis.asyncio as redis
from redis.exceptions import RedisError

log = logging.getLogger("events_api.announcements")

CHANNEL = "events-api:schema-versions"
RETRY_SECONDS = 1.0


class VersionAnnouncements:
    def __init__(
        self,
        redis_url: str | None,
        on_new_version: Callable[[str, str], None],
        on_resubscribed: Callable[[], None],
    ) -> None:
        self.redis_url = redis_url
        self.on_new_version = on_new_version
        self.on_resubscribed = on_resubscribed
        self.receiving = False
        self._client: redis.Redis | None = None
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.redis_url is None:
            log.info("EVENTS_API_REDIS_URL is not set: schema version changes reach other replicas within 1 s")
            return
        self._client = redis.Redis.from_url(
            self.redis_url, socket_connect_timeout=1, socket_timeout=2, health_check_interval=5
        )
        self._listener = asyncio.create_task(self._listen())

    async def announce(self, tenant_id: str, event_type: str) -> None:
        """Best effort: if Redis is unreachable the other replicas catch up when their cache entries expire."""
        if self._client is None:
            return
        try:
            await self._client.publish(CHANNEL, f"{tenant_id}\x00{event_type}")
        except (RedisError, OSError) as exc:
            log.warning("could not announce a new schema version: %s", type(exc).__name__)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self.receiving = False

    async def _listen(self) -> None:
        assert self._client is not None
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(CHANNEL)
                self.on_resubscribed()
                self.receiving = True
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._received(message["data"])
            except (RedisError, OSError) as exc:
                if self.receiving:
                    log.warning("schema version announcements interrupted (%s); retrying", type(exc).__name__)
                self.receiving = False
                await asyncio.sleep(RETRY_SECONDS)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _received(self, data: bytes) -> None:
        tenant_id, _, event_type = data.decode(errors="replace").partition("\x00")
        if event_type:
            self.on_new_version(tenant_id, event_type)
