"""The one settings object: every `EVENTS_API_*` variable, parsed and validated once at start."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

PREFIX = "EVENTS_API_"

_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class SettingsError(Exception):
    """A setting is missing or malformed; the message is one line naming the variable."""


def parse_duration(text: str) -> timedelta:
    """Parse `90s`, `15m`, `24h`, `7d`, `1h30m` (or a bare number of seconds)."""
    text = text.strip().lower()
    if text.isdigit():
        return timedelta(seconds=int(text))
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration like 30s, 15m, 24h or 7d")
    return timedelta(seconds=total)


def _positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("must be 0 or a positive integer")
    return value


def _log_format(text: str) -> str:
    value = text.strip().lower()
    if value not in ("json", "text"):
        raise ValueError("must be json or text")
    return value


def _postgres_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in {"postgresql", "postgres", "postgresql+psycopg"} or not (parts.hostname or parts.path):
        raise ValueError("must be a postgresql://user@host:port/dbname URL")
    return text.strip()


def _redis_url(text: str) -> str:
    if urlsplit(text.strip()).scheme not in {"redis", "rediss", "unix"}:
        raise ValueError("must be a redis://host:port/db URL")
    return text.strip()


def _bootstrap_servers(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    if not servers or any(not re.fullmatch(r"[\w.\-\[\]:]+:\d+", s) for s in servers):
        raise ValueError("must be a comma-separated list of host:port")
    return ",".join(servers)


def _clusters(text: str) -> dict[str, str]:
    """`eu=k1:9092,k2:9092;us=k3:9092`: named Kafka clusters besides `default`."""
    clusters: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, servers = part.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", name.strip()):
            raise ValueError("must look like name=host:port[,host:port][;name=...] with lower-case names")
        clusters[name.strip()] = _bootstrap_servers(servers)
    return clusters


def _token(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError("must be a non-empty token without whitespace")
    return text


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str | None = None
    kafka_bootstrap_servers: str | None = None
    redis_url: str | None = None
    admin_token: str | None = field(default=None, repr=False)
    max_body_bytes: int = 1_048_576
    idempotency_ttl: timedelta = timedelta(hours=24)
    outbox_retention: timedelta = timedelta(days=7)
    max_batch_events: int = 500
    db_pool_size: int = 10
    partitions_ahead_days: int = 7
    kafka_clusters: dict[str, str] = field(default_factory=dict)
    relay_batch_size: int = 2000
    read_timeout: timedelta = timedelta(seconds=15)
    rate_limit_events_per_second: int = 10_000
    rate_limit_bytes_per_second: int = 32 * 1024 * 1024
    log_format: str = "json"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every setting; the first missing or malformed one raises SettingsError."""
        env = os.environ if environ is None else environ
        parsers = {
            "database_url": _postgres_url,
            "kafka_bootstrap_servers": _bootstrap_servers,
            "redis_url": _redis_url,
            "admin_token": _token,
            "max_body_bytes": _positive_int,
            "idempotency_ttl": parse_duration,
            "outbox_retention": parse_duration,
            "max_batch_events": _positive_int,
            "db_pool_size": _positive_int,
            "partitions_ahead_days": _positive_int,
            "kafka_clusters": _clusters,
            "relay_batch_size": _positive_int,
            "read_timeout": parse_duration,
            "rate_limit_events_per_second": _non_negative_int,
            "rate_limit_bytes_per_second": _non_negative_int,
            "log_format": _log_format,
        }
        values: dict[str, object] = {}
        for name, parse in parsers.items():
            var = PREFIX + name.upper()
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            try:
                values[name] = parse(raw)
            except ValueError as exc:
                raise SettingsError(f"{var}: {exc}") from None
        for name in ("idempotency_ttl", "outbox_retention", "read_timeout"):
            if name in values and values[name] <= timedelta(0):  # type: ignore[operator]
                raise SettingsError(f"{PREFIX}{name.upper()}: must be longer than zero")
        return cls(**values)  # type: ignore[arg-type]

    def require(self, *names: str) -> Settings:
        """Fail with one clear line when a setting that this command needs is not set."""
        for name in names:
            if getattr(self, name) is None:
                raise SettingsError(f"{PREFIX}{name.upper()} is required but not set")
        return self

    @property
    def psycopg_conninfo(self) -> str:
        """The database URL as libpq takes it."""
        self.require("database_url")
        assert self.database_url is not None
        return re.sub(r"^(postgresql|postgres)(\+psycopg)?://", "postgresql://", self.database_url)

    def kafka_cluster_servers(self) -> dict[str, str]:
        """Every cluster the relay knows: `default` from KAFKA_BOOTSTRAP_SERVERS, the others by name."""
        named = dict(self.kafka_clusters)
        if self.kafka_bootstrap_servers:
            named.setdefault("default", self.kafka_bootstrap_servers)
        return named

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL in SQLAlchemy's form, always with the psycopg 3 driver."""
        self.require("database_url")
        assert self.database_url is not None
        return re.sub(r"^(postgresql|postgres)(\+psycopg)?://", "postgresql+psycopg://", self.database_url)
