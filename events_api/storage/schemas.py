"""Schema registry rows of one tenant: event types and their numbered, immutable schema versions."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from events_api.storage.audit import record
from events_api.storage.database import Database
from events_api.storage.tables import event_types, schema_versions

# A schema version belongs to the event type with the same tenant and name.
_VERSION_OF_TYPE = and_(
    schema_versions.c.tenant_id == event_types.c.tenant_id,
    schema_versions.c.event_type == event_types.c.event_type,
)


@dataclass(frozen=True, slots=True)
class StoredSchema:
    event_type: str
    version: int
    schema: dict[str, Any]
    created_at: datetime
    created_by: str | None
    compatibility: str


@dataclass(frozen=True, slots=True)
class TypeSummary:
    event_type: str
    compatibility: str
    latest_version: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class VersionSummary:
    version: int
    created_at: datetime
    created_by: str | None


# Called with (compatibility mode, [(version, schema), ...] oldest first); raises to refuse the new version.
CompatibilityCheck = Callable[[str, list[tuple[int, Any]]], None]


@dataclass(frozen=True, slots=True)
class Registration:
    version: int
    compatibility: str
    created: bool


class SchemaStore:
    """Every query is scoped to `tenant_id`, fixed at construction."""

    def __init__(self, db: Database, tenant_id: str) -> None:
        self.db = db
        self.tenant_id = tenant_id

    def _of_tenant(self, event_type: str) -> Any:
        return and_(schema_versions.c.tenant_id == self.tenant_id, schema_versions.c.event_type == event_type)

    async def register(
        self,
        event_type: str,
        schema: dict[str, Any],
        fingerprint: bytes,
        *,
        now: datetime,
        created_by: str,
        check: CompatibilityCheck,
    ) -> Registration:
        """Store `schema` as the next version, or return the version that already has this fingerprint.
        `check(mode, previous)` runs under the type's lock before a new version is stored; it raises to refuse."""
        async with self.db.transaction() as conn:
            # ensure_event_type: the type exists from its first registration on
            await conn.execute(
                pg_insert(event_types)
                .values(tenant_id=self.tenant_id, event_type=event_type, created_at=now)
                .on_conflict_do_nothing()
            )
            # lock_event_type: registrations of one type are serialised, so versions are gap-free
            compatibility = (
                await conn.execute(
                    select(event_types.c.compatibility)
                    .where(event_types.c.tenant_id == self.tenant_id, event_types.c.event_type == event_type)
                    .with_for_update()
                )
            ).scalar_one()
            # find_identical_version: same canonical schema already registered
            existing = (
                await conn.execute(
                    select(schema_versions.c.version).where(
                        self._of_tenant(event_type), schema_versions.c.fingerprint == fingerprint
                    )
                )
            ).scalar_one_or_none()
            if existing is not None:
                return Registration(existing, compatibility, created=False)
            check(compatibility, await self._versions(conn, event_type))
            # next_version: one past the highest
            version = (
                await conn.execute(
                    select(func.coalesce(func.max(schema_versions.c.version), 0) + 1).where(self._of_tenant(event_type))
                )
            ).scalar_one()
            await conn.execute(
                schema_versions.insert().values(
                    tenant_id=self.tenant_id,
                    event_type=event_type,
                    version=version,
                    schema=schema,
                    fingerprint=fingerprint,
                    created_at=now,
                    created_by=created_by,
                )
            )
            await record(
                conn,
                tenant_id=self.tenant_id,
                actor=created_by,
                action="schema.version_registered",
                at=now,
                target=event_type,
                details={"version": version, "compatibility": compatibility},
            )
            return Registration(version, compatibility, created=True)

    async def _versions(self, conn: AsyncConnection, event_type: str) -> list[tuple[int, Any]]:
        """all_schema_versions: every (version, schema) of a type, oldest first."""
        rows = await conn.execute(
            select(schema_versions.c.version, schema_versions.c.schema)
            .where(self._of_tenant(event_type))
            .order_by(schema_versions.c.version)
        )
        return [(row.version, row.schema) for row in rows]

    async def history(self, event_type: str) -> tuple[str, list[tuple[int, Any]]] | None:
        """The type's compatibility mode and every (version, schema), oldest first; None for an unknown type."""
        async with self.db.autocommit() as conn:
            mode = (
                await conn.execute(
                    select(event_types.c.compatibility).where(
                        event_types.c.tenant_id == self.tenant_id, event_types.c.event_type == event_type
                    )
                )
            ).scalar_one_or_none()
            if mode is None:
                return None
            return mode, await self._versions(conn, event_type)

    async def list_types(self) -> list[TypeSummary]:
        """list_event_types: the tenant's event types with their mode and latest version."""
        stmt = (
            select(
                event_types.c.event_type,
                event_types.c.compatibility,
                func.max(schema_versions.c.version),
                event_types.c.created_at,
            )
            .join(schema_versions, _VERSION_OF_TYPE)
            .where(event_types.c.tenant_id == self.tenant_id)
            .group_by(event_types.c.event_type, event_types.c.compatibility, event_types.c.created_at)
            .order_by(event_types.c.event_type)
        )
        async with self.db.autocommit() as conn:
            return [TypeSummary(*row) for row in await conn.execute(stmt)]

    async def list_versions(self, event_type: str) -> list[VersionSummary]:
        """list_schema_versions: a type's versions, oldest first, with who registered each and when."""
        stmt = (
            select(schema_versions.c.version, schema_versions.c.created_at, schema_versions.c.created_by)
            .where(self._of_tenant(event_type))
            .order_by(schema_versions.c.version)
        )
        async with self.db.autocommit() as conn:
            return [VersionSummary(*row) for row in await conn.execute(stmt)]

    async def set_compatibility(self, event_type: str, mode: str, now: datetime, *, actor: str) -> bool:
        """set_compatibility: change a type's mode; False when the tenant has no such type."""
        stmt = (
            update(event_types)
            .where(event_types.c.tenant_id == self.tenant_id, event_types.c.event_type == event_type)
            .values(compatibility=mode)
            .returning(event_types.c.event_type)
        )
        async with self.db.transaction() as conn:
            if (await conn.execute(stmt)).first() is None:
                return False
            await record(
                conn,
                tenant_id=self.tenant_id,
                actor=actor,
                action="schema.compatibility_updated",
                at=now,
                target=event_type,
                details={"compatibility": mode},
            )
            return True

    async def get(self, event_type: str, version: int | None) -> StoredSchema | None:
        """get_schema_version: one version of a type, or its latest when `version` is None."""
        stmt = (
            select(
                schema_versions.c.version,
                schema_versions.c.schema,
                schema_versions.c.created_at,
                schema_versions.c.created_by,
                event_types.c.compatibility,
            )
            .join(event_types, _VERSION_OF_TYPE)
            .where(self._of_tenant(event_type))
            .order_by(schema_versions.c.version.desc())
            .limit(1)
        )
        if version is not None:
            stmt = stmt.where(schema_versions.c.version == version)
        async with self.db.autocommit() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return StoredSchema(event_type, row.version, row.schema, row.created_at, row.created_by, row.compatibility)

    async def latest_versions(self, types: Collection[str]) -> dict[str, int]:
        """latest_versions: the highest version of each of `types` that has one."""
        stmt = (
            select(schema_versions.c.event_type, func.max(schema_versions.c.version))
            .where(schema_versions.c.tenant_id == self.tenant_id, schema_versions.c.event_type.in_(list(types)))
            .group_by(schema_versions.c.event_type)
        )
        async with self.db.autocommit() as conn:
            return {row[0]: row[1] for row in await conn.execute(stmt)}

    async def load(self, wanted: Collection[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
        """load_schema_documents: the schema documents of (type, version) pairs that exist."""
        stmt = select(schema_versions.c.event_type, schema_versions.c.version, schema_versions.c.schema).where(
            schema_versions.c.tenant_id == self.tenant_id,
            tuple_(schema_versions.c.event_type, schema_versions.c.version).in_(list(wanted)),
        )
        async with self.db.autocommit() as conn:
            return {(row[0], row[1]): row[2] for row in await conn.execute(stmt)}
