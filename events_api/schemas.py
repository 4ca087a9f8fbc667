"""The schema registry: checking and storing JSON Schemas, and the compiled validators used at ingest.

Validators are compiled once per (tenant, event type, version) and cached; versions are immutable,
so a cached validator never goes stale. Remote `$ref`s are refused: the service never fetches URLs.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jsonschema_rs
import msgspec

from events_api.decoding import escape
from events_api.errors import FieldError, NotFound, ValidationFailed
from events_api.models import EVENT_TYPE_PATTERN, MAX_EVENT_TYPE_LENGTH
from events_api.storage.database import Database
from events_api.storage.schemas import Registration, SchemaStore, StoredSchema

MAX_ERRORS = 50
LATEST_VERSION_SECONDS = 1.0
LATEST_CACHE_SIZE = 100_000
_EVENT_TYPE = re.compile(EVENT_TYPE_PATTERN)
_canonical = msgspec.json.Encoder(order="sorted")


def check_event_type(event_type: str) -> str:
    if len(event_type) > MAX_EVENT_TYPE_LENGTH or not _EVENT_TYPE.match(event_type):
        raise ValidationFailed(
            f"event type {event_type[:80]!r} must match {EVENT_TYPE_PATTERN} and be at most "
            f"{MAX_EVENT_TYPE_LENGTH} characters"
        )
    return event_type


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


class SchemaRegistry:
    def __init__(self, db: Database, cache_size: int = 10_000, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.monotonic = monotonic
        self._validators = _Lru(cache_size)
        # (tenant, type) -> (latest version, when read). A version registered through another replica
        # is seen within LATEST_VERSION_SECONDS; until then events validate against (and are labelled
        # with) the previous latest version, which is consistent. Registering here invalidates at once.
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
        created_by: str | None,
    ) -> Registration:
        check_event_type(event_type)
        compile_schema(schema)
        registration = await self.store(tenant_id).register(
            event_type, schema, schema_fingerprint(schema), now=now, created_by=created_by
        )
        self._latest.pop((tenant_id, event_type), None)
        return registration

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
        latest: dict[str, int] = {}
        for event_type in types:
            entry = self._latest.get((store.tenant_id, event_type))
            if entry is not None and now - entry[1] <= LATEST_VERSION_SECONDS:
                latest[event_type] = entry[0]
        if missing := types - latest.keys():
            fetched = await store.latest_versions(missing)
            if len(self._latest) > LATEST_CACHE_SIZE:
                self._latest.clear()
            for event_type, version in fetched.items():
                self._latest[(store.tenant_id, event_type)] = (version, now)
            latest.update(fetched)
        return latest
