"""The connection pool and the one place that turns a lost database into `StorageUnavailable`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from events_api.errors import StorageUnavailable

log = logging.getLogger("events_api.storage")

# Errors that mean "the database is not reachable or not answering", never "your data is wrong".
_UNAVAILABLE = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,
    ConnectionError,
    TimeoutError,
)


@contextmanager
def storage_errors() -> Iterator[None]:
    try:
        yield
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
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"


class Database:
    """Owns the async engine. `transaction()` for multi-statement work, `autocommit()` for the
    single-statement hot path (the statement's own implicit transaction is committed when it returns)."""

    def __init__(self, url: str, *, pool_size: int = 10, application_name: str = "events-api") -> None:
        # Per process: `serve --workers N` opens up to N * pool_size connections.
        self.engine: AsyncEngine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=5,
            pool_recycle=1800,
            connect_args={"connect_timeout": 3, "application_name": application_name},
        )
        self._autocommit_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")

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

    async def dispose(self) -> None:
        await self.engine.dispose()
