"""The naive baseline: the least an HTTP outbox can do, on the same server stack as the real one.

A bare ASGI app under uvicorn (same workers, event loop and HTTP parser as `events-api serve`)
that answers every POST with one INSERT into `naive_outbox` over psycopg 3 in autocommit, from a
small pool of connections opened at start. No auth, no validation, no idempotency, no framework.
It answers 202 with the new row's id once the INSERT has returned (so the row is committed, as
with the real service). `GET /readyz` answers 200 once the pool is open.

Run by the bench as `python -m bench.naive --workers 2 --port N` with `NAIVE_DATABASE_URL` set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import psycopg

from events_api.cli import uvicorn_options

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

TABLE_DDL = """
CREATE TABLE IF NOT EXISTS naive_outbox (
    id bigserial PRIMARY KEY,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
_INSERT = b"INSERT INTO naive_outbox (event_type, payload) VALUES (%s, %s::jsonb) RETURNING id"


class NaiveOutbox:
    def __init__(self, database_url: str, pool_size: int) -> None:
        self.database_url = database_url
        self.pool_size = pool_size
        self.pool: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        self.connections: list[psycopg.AsyncConnection[Any]] = []

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(self.database_url, autocommit=True, application_name="naive")
        self.connections.append(conn)
        return conn

    async def open(self) -> None:
        for conn in await asyncio.gather(*(self._connect() for _ in range(self.pool_size))):
            self.pool.put_nowait(conn)

    async def close(self) -> None:
        for conn in self.connections:
            await conn.close()

    async def insert(self, event_type: str, payload: str) -> int:
        conn = await self.pool.get()
        try:
            cursor = await conn.execute(_INSERT, (event_type, payload))
            row = await cursor.fetchone()
        finally:
            if conn.closed:
                self.connections.remove(conn)
                conn = await self._connect()
            self.pool.put_nowait(conn)
        assert row is not None
        return int(row[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.open()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _respond(send, 200 if scope["path"] == "/readyz" else 404, b"{}")
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        try:
            event = json.loads(b"".join(chunks))
            new_id = await self.insert(str(event["event_type"]), json.dumps(event["payload"]))
        except (ValueError, KeyError, TypeError) as exc:
            await _respond(send, 400, json.dumps({"error": str(exc)}).encode())
        except psycopg.Error as exc:
            await _respond(send, 503, json.dumps({"error": str(exc)}).encode())
        else:
            await _respond(send, 202, b'{"id":%d}' % new_id)


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app() -> NaiveOutbox:
    """uvicorn's factory: reads NAIVE_DATABASE_URL and NAIVE_POOL_SIZE (connections per worker)."""
    return NaiveOutbox(os.environ["NAIVE_DATABASE_URL"], int(os.environ.get("NAIVE_POOL_SIZE", "32")))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.naive", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    # The same uvicorn settings as `events-api serve`.
    uvicorn.run("bench.naive:create_app", host=args.host, port=args.port, workers=args.workers, **uvicorn_options())


if __name__ == "__main__":
    main()
