"""The schema registry: checking and storing JSON Schemas, compatibility between versions, and the
compiled validators used at ingest.

Validators are compiled once per (tenant, event type, version) and cached; versions are immutable,
so a cached validator never goes stale. Only "which version is latest" can change: it is cached per
(tenant, type) and dropped on every replica when a version is registered (the `announce` hook,
events_api/announcements.py); when the announcements are not flowing the cache lives only
LATEST_VERSION_SECONDS. Remote `$ref`s are refused: the service never fetches URLs.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jsonschema_rs
import msgspec

from events_api.compatibility import MODES, Finding, check_compatibility
from events_api.decoding import escape
from events_api.errors import Conflict, FieldError, NotFound, ValidationFailed
from events_api.models import EVENT_TYPE_PATTERN, MAX_EVENT_TYPE_LENGTH
from events_api.storage.database import Database
from events_api.storage.schemas import Registration, SchemaStore, StoredSchema, TypeSummary, VersionSummary

MAX_ERRORS = 50
MAX_SCHEMA_BYTES = 256 * 1024
MAX_SCHEMA_DEPTH = 32
LATEST_VERSION_SECONDS = 1.0  # while announcements of new versions are not flowing
LATEST_VERSION_SECONDS_ANNOUNCED = 60.0  # while they are: a new version drops the entry at once
LATEST_CACHE_SIZE = 100_000
_EVENT_TYPE = re.compile(EVENT_TYPE_PATTERN)
_canonical = msgspec.json.Encoder(order="sorted")


def check_event_type(event_type: str) -> str:
    if len(event_type) > MAX_EVENT_TYPE_LENGTH or not _EVENT_TYPE.fullmatch(event_type):
        raise ValidationFailed(
            f"event type {event_type[:80]!r} must match {EVENT_TYPE_PATTERN} and be at most "
            f"{MAX_EVENT_TYPE_LENGTH} characters"
        )
    return event_type


def _depth(node: Any, limit: int) -> int:
    """Nesting depth of a JSON value, counted no further than `limit` + 1."""
    if limit < 0 or not isinstance(node, dict | list):
        return 0
    children = node.values() if isinstance(node, dict) else node
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def check_schema_limits(schema: dict[str, Any]) -> None:
    size = len(_canonical.encode(schema))
    if size > MAX_SCHEMA_BYTES:
        raise ValidationFailed(
            f"the schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}",
            errors=[FieldError("/schema", f"at most {MAX_SCHEMA_BYTES} bytes")],
        )
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise ValidationFailed(
            f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels",
            errors=[FieldError("/schema", f"at most {MAX_SCHEMA_DEPTH} levels of nesting")],
        )


def incompatibilities(findings: list[Finding]) -> list[FieldError]:
    """Compatibility findings as problem `errors`, pointing into the request's `schema` member."""
    return [FieldError("/schema" + f.path, f.message) for f in findings]


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"remote $ref {uri!r} is not allowed; put the definition in $defs")


def compile_schema(schema: dict[str, Any], pointer: str = "/schema") -> Any:
    """A validator for `schema`, or ValidationFailed saying why it is not a usable JSON Schema."""
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = pointer + "".join(f"/{escape(p)}" for p in exc.instance_path)
        raise ValidationFailed(
            "the schema is not a valid JSON Schema", errors=[FieldError(where, exc.message)]
        ) from None
    except jsonschema_rs.ReferencingError as exc:
        raise ValidationFailed(f"the schema is not usable: {exc}", errors=[FieldError(pointer, str(exc))]) from None
    try:
        return jsonschema_rs.validator_for(schema, retriever=_refuse_remote)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        message = str(exc).split("\n", 1)[0]
        raise ValidationFailed(f"the schema is not usable: {message}", errors=[FieldError(pointer, message)]) from None


def schema_fingerprint(schema: dict[str, Any]) -> bytes:
    return hashlib.sha256(_canonical.encode(schema)).digest()


def violations(validator: Any, instance: Any, pointer: str, limit: int) -> Iterator[FieldError]:
    """Every way `instance` breaks the schema, as JSON Pointers into the request body."""
    if validator.is_valid(instance):  # the common case, and much cheaper than building errors
        return
    for count, error in enumerate(validator.iter_errors(instance)):
        if count >= limit:
            return
        path = pointer + "".join(f"/{escape(p)}" for p in error.instance_path)
        kind = error.kind
        if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
            path += f"/{escape(kind.property)}"
        yield FieldError(path, error.message)


@dataclass(frozen=True, slots=True)
class ResolvedSchema:
    version: int
    validator: Any


class _Lru:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, str, int], Any] = OrderedDict()

    def get(self, key: tuple[str, str, int]) -> Any | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: tuple[str, str, int], value: Any) -> None:
        self.items[key] = value
        if len(self.items) > self.size:
            self.items.popitem(last=False)


@dataclass(frozen=True, slots=True)
class CompatibilityReport:
    compatible: bool
    findings: list[Finding]


class SchemaRegistry:
    def __init__(self, db: Database, cache_size: int = 10_000, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.monotonic = monotonic
        self._validators = _Lru(cache_size)
        # Set by the app: tells every replica that (tenant, type) has a new version; `announced()` says
        # whether such announcements are currently being received.
        self.announce: Callable[[str, str], Awaitable[None]] | None = None
        self.announced: Callable[[], bool] = lambda: False
        # (tenant, type) -> (latest version, when read). Dropped here and, through `announce`, on every
        # replica when a version is registered. If an announcement is missed, events validate against (and
        # are labelled with) the previous latest version until the entry expires, which stays consistent.
        self._latest: dict[tuple[str, str], tuple[int, float]] = {}

    def store(self, tenant_id: str) -> SchemaStore:
        return SchemaStore(self.db, tenant_id)

    async def register(
        self,
        tenant_id: str,
        event_type: str,
        schema: dict[str, Any],
        *,
        now: datetime,
        created_by: str,
    ) -> Registration:
        check_event_type(event_type)
        check_schema_limits(schema)
        compile_schema(schema)

        def compatible(mode: str, previous: list[tuple[int, Any]]) -> None:
            findings = check_compatibility(mode, schema, previous)
            if findings:
                raise Conflict(
                    f"the schema is not {mode} compatible: {len(findings)} incompatibilit"
                    + ("y" if len(findings) == 1 else "ies"),
                    errors=incompatibilities(findings),
                )

        registration = await self.store(tenant_id).register(
            event_type, schema, schema_fingerprint(schema), now=now, created_by=created_by, check=compatible
        )
        if registration.created:
            self.forget_latest(tenant_id, event_type)
            if self.announce is not None:
                await self.announce(tenant_id, event_type)
        return registration

    def forget_latest(self, tenant_id: str, event_type: str) -> None:
        self._latest.pop((tenant_id, event_type), None)

    def forget_all_latest(self) -> None:
        self._latest.clear()

    async def check(self, tenant_id: str, event_type: str, schema: dict[str, Any]) -> CompatibilityReport:
        """Would `schema` be accepted as the next version? (A type with no versions accepts anything valid.)"""
        check_event_type(event_type)
        check_schema_limits(schema)
        compile_schema(schema)
        history = await self.store(tenant_id).history(event_type)
        if history is None:
            return CompatibilityReport(True, [])
        mode, previous = history
        fingerprint = schema_fingerprint(schema)
        if any(schema_fingerprint(old) == fingerprint for _, old in previous):
            return CompatibilityReport(True, [])
        findings = check_compatibility(mode, schema, previous)
        return CompatibilityReport(not findings, findings)

    async def set_compatibility(self, tenant_id: str, event_type: str, mode: str, now: datetime, *, actor: str) -> None:
        check_event_type(event_type)
        if mode not in MODES:
            raise ValidationFailed(
                f"compatibility must be one of {', '.join(MODES)}",
                errors=[FieldError("/compatibility", f"must be one of {', '.join(MODES)}")],
            )
        if not await self.store(tenant_id).set_compatibility(event_type, mode, now, actor=actor):
            raise NotFound(f"no event type {event_type!r}")

    async def list_types(self, tenant_id: str) -> list[TypeSummary]:
        return await self.store(tenant_id).list_types()

    async def list_versions(self, tenant_id: str, event_type: str) -> list[VersionSummary]:
        check_event_type(event_type)
        versions = await self.store(tenant_id).list_versions(event_type)
        if not versions:
            raise NotFound(f"no event type {event_type!r}")
        return versions

    async def get(self, tenant_id: str, event_type: str, version: int | None) -> StoredSchema:
        check_event_type(event_type)
        found = await self.store(tenant_id).get(event_type, version)
        if found is None:
            what = "no schema" if version is None else f"no version {version}"
            raise NotFound(f"event type {event_type!r} has {what}")
        return found

    async def resolve(
        self, tenant_id: str, wanted: set[tuple[str, int | None]]
    ) -> dict[tuple[str, int | None], ResolvedSchema]:
        """Validators for (event type, version or None for latest); pairs that do not exist are absent."""
        store = self.store(tenant_id)
        latest = await self._latest_versions(store, {t for t, v in wanted if v is None})
        exact = {(t, v if v is not None else latest.get(t)) for t, v in wanted}
        concrete = {(t, v) for t, v in exact if v is not None}
        missing = {pair for pair in concrete if self._validators.get((tenant_id, *pair)) is None}
        if missing:
            for pair, document in (await store.load(missing)).items():
                self._validators.put((tenant_id, *pair), compile_schema(document))
        resolved: dict[tuple[str, int | None], ResolvedSchema] = {}
        for event_type, version in wanted:
            number = version if version is not None else latest.get(event_type)
            validator = None if number is None else self._validators.get((tenant_id, event_type, number))
            if number is not None and validator is not None:
                resolved[(event_type, version)] = ResolvedSchema(number, validator)
        return resolved

    async def _latest_versions(self, store: SchemaStore, types: set[str]) -> dict[str, int]:
        now = self.monotonic()
        ttl = LATEST_VERSION_SECONDS_ANNOUNCED if self.announced() else LATEST_VERSION_SECONDS
        latest: dict[str, int] = {}
        for event_type in types:
            entry = self._latest.get((store.tenant_id, event_type))
            if entry is not None and now - entry[1] <= ttl:
                latest[event_type] = entry[0]
        if missing := types - latest.keys():
            fetched = await store.latest_versions(missing)
            if len(self._latest) > LATEST_CACHE_SIZE:
                self._latest.clear()
            for event_type, version in fetched.items():
                self._latest[(store.tenant_id, event_type)] = (version, now)
            latest.update(fetched)
        return latest
