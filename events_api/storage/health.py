"""Readiness queries."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from events_api.storage.database import Database

# schema_revision: the Alembic revision the database is at
_REVISION = text("SELECT version_num FROM alembic_version")


async def schema_revision(db: Database) -> str | None:
    async with db.autocommit() as conn:
        try:
            return (await conn.execute(_REVISION)).scalar_one_or_none()
        except ProgrammingError:  # never migrated: no alembic_version table
            return None
