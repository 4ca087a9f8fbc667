"""The connection pool and the one place that turns a lost database into `StorageUnavailable`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from events_api.errors import StorageUnavailable, ValidationFailed

log = logging.getLogger("events_api.storage")

# Errors that mean "the database is not reachable or not answering", never "your data is wrong".
_UNAVAILABLE = (
    psycopg.OperationalError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
    ConnectionError,
    TimeoutError,
)


# SQLSTATEs for text the database cannot store (U+0000 in text or jsonb): the client's data, not our bug.
_UNSTORABLE_TEXT = {"22021", "22P05"}


@contextmanager
def storage_errors() -> Iterator[None]:
    try:
        yield
    except (psycopg.DataError, sqlalchemy.exc.DataError) as exc:
        cause = getattr(exc, "orig", None) or exc
        # psycopg itself refuses NUL in a text parameter before sending it (no SQLSTATE then).
        unstorable = getattr(cause, "sqlstate", None) in _UNSTORABLE_TEXT or "NUL (0x00)" in str(cause)
        if unstorable:
            raise ValidationFailed("the request holds text that cannot be stored (the NUL character, U+0000)") from exc
        raise
    except _UNAVAILABLE as exc:
        log.warning("storage unavailable: %s", _reason(exc))
        raise StorageUnavailable("the event store is unreachable; nothing was stored") from exc
    except sqlalchemy.exc.DBAPIError as exc:
        if exc.connection_invalidated:
            log.warning("storage connection lost: %s", _reason(exc))
            raise StorageUnavailable("the connection to the event store was lost") from exc
        raise


def _reason(exc: BaseException) -> str:
    """The driver's first line, without the statement or its parameters (they may hold payloads)."""
    cause = getattr(exc, "orig", None) or exc
    if isinstance(cause, psycopg.Error) and cause.diag.message_primary:
        return f"{type(cause).__name__}: {cause.diag.message_primary}"
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"


class Database:
    """Owns the connection pools. `transaction()` for multi-statement work; `autocommit()` for single
    statements (each is its own transaction, committed when it returns), which is the hot path.

    Two engines so that no connection switches isolation level on every checkout: the autocommit pool
    gets `pool_size` connections, the transactional one a quarter of that (admin and schema writes)."""

    def __init__(self, url: str, *, pool_size: int = 10, application_name: str = "events-api") -> None:
        options: dict[str, Any] = {
            "max_overflow": 0,
            "pool_timeout": 5,
            "pool_recycle": 1800,
            "connect_args": {"connect_timeout": 3, "application_name": application_name},
        }
        self.engine: AsyncEngine = create_async_engine(url, pool_size=max(2, pool_size // 4), **options)
        self._autocommit_engine = create_async_engine(url, pool_size=pool_size, isolation_level="AUTOCOMMIT", **options)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        with storage_errors():
            async with self.engine.begin() as conn:
                yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        with storage_errors():
            async with self._autocommit_engine.connect() as conn:
                yield conn

    @asynccontextmanager
    async def autocommit_driver(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The pooled psycopg connection itself, for the hot-path statement that needs none of
        SQLAlchemy's statement machinery (its parameters go straight to the driver)."""
        with storage_errors():
            async with self._autocommit_engine.connect() as conn:
                raw = await conn.get_raw_connection()
                driver: psycopg.AsyncConnection[Any] = raw.driver_connection  # type: ignore[assignment]
                try:
                    yield driver
                except psycopg.OperationalError:
                    # SQLAlchemy did not see this error: drop the connection so the pool does not reuse it.
                    await conn.invalidate()
                    raise

    async def dispose(self) -> None:
        await self._autocommit_engine.dispose()
        await self.engine.dispose()
