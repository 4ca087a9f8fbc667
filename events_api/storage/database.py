"""The connection pool and the one place that turns a lost database into `StorageUnavailable`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import sqlalchemy.exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from events_api.errors import StorageUnavailable

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
        raise StorageUnavailable("the event store is unreachable; nothing was stored") from exc
    except sqlalchemy.exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise StorageUnavailable("the connection to the event store was lost") from exc
        raise


class Database:
    """Owns the async engine. `transaction()` for multi-statement work, `autocommit()` for the
    single-statement hot path (the statement's own implicit transaction is committed when it returns)."""

    def __init__(self, url: str, *, pool_size: int = 20, application_name: str = "events-api") -> None:
        self.engine: AsyncEngine = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
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
