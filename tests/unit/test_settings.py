from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

from events_api.settings import Settings, SettingsError, parse_duration


def test_defaults_match_the_contract() -> None:
    settings = Settings.from_env({})
    assert settings.max_body_bytes == 1_048_576
    assert settings.idempotency_ttl == timedelta(hours=24)
    assert settings.outbox_retention == timedelta(days=7)
    assert settings.max_batch_events == 500


def test_reads_every_variable() -> None:
    settings = Settings.from_env(
        {
            "EVENTS_API_DATABASE_URL": "postgresql://u@db:5432/events",
            "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": "k1:9092, k2:9092",
            "EVENTS_API_REDIS_URL": "redis://cache:6379/0",
            "EVENTS_API_ADMIN_TOKEN": "s3cret",
            "EVENTS_API_MAX_BODY_BYTES": "2048",
            "EVENTS_API_IDEMPOTENCY_TTL": "1h30m",
            "EVENTS_API_OUTBOX_RETENTION": "14d",
            "EVENTS_API_MAX_BATCH_EVENTS": "50",
        }
    )
    assert settings.kafka_bootstrap_servers == "k1:9092,k2:9092"
    assert settings.idempotency_ttl == timedelta(minutes=90)
    assert settings.outbox_retention == timedelta(days=14)
    assert (settings.max_body_bytes, settings.max_batch_events) == (2048, 50)
    assert settings.sqlalchemy_url == "postgresql+psycopg://u@db:5432/events"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("EVENTS_API_DATABASE_URL", "mysql://x/y"),
        ("EVENTS_API_KAFKA_BOOTSTRAP_SERVERS", "no-port"),
        ("EVENTS_API_REDIS_URL", "http://x"),
        ("EVENTS_API_ADMIN_TOKEN", "has space"),
        ("EVENTS_API_MAX_BODY_BYTES", "lots"),
        ("EVENTS_API_MAX_BODY_BYTES", "0"),
        ("EVENTS_API_IDEMPOTENCY_TTL", "24 hours"),
        ("EVENTS_API_OUTBOX_RETENTION", "0s"),
        ("EVENTS_API_MAX_BATCH_EVENTS", "-1"),
    ],
)
def test_malformed_values_name_the_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800), ("1h30m", 5400)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_require_names_the_missing_variable() -> None:
    with pytest.raises(SettingsError, match="EVENTS_API_DATABASE_URL is required"):
        Settings.from_env({}).require("database_url")


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")}
    return subprocess.run(
        [sys.executable, "-m", "events_api", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["serve"], {}, "EVENTS_API_DATABASE_URL is required"),
        (["serve"], {"EVENTS_API_DATABASE_URL": "postgresql://x/y"}, "EVENTS_API_ADMIN_TOKEN is required"),
        (["migrate"], {"EVENTS_API_MAX_BODY_BYTES": "big"}, "EVENTS_API_MAX_BODY_BYTES"),
        (["serve"], {"EVENTS_API_IDEMPOTENCY_TTL": "forever"}, "EVENTS_API_IDEMPOTENCY_TTL"),
    ],
)
def test_cli_fails_at_start_with_one_clear_line(args: list[str], env: dict[str, str], needle: str) -> None:
    result = _cli(*args, **env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


def test_named_kafka_clusters() -> None:
    settings = Settings.from_env(
        {
            "EVENTS_API_KAFKA_BOOTSTRAP_SERVERS": "k0:9092",
            "EVENTS_API_KAFKA_CLUSTERS": "eu=k1:9092,k2:9092; us=k3:9092",
            "EVENTS_API_RELAY_BATCH_SIZE": "500",
        }
    )
    assert settings.kafka_cluster_servers() == {"eu": "k1:9092,k2:9092", "us": "k3:9092", "default": "k0:9092"}
    assert settings.relay_batch_size == 500
    for bad in ("eu", "EU=k1:9092", "eu=no-port", "=k1:9092"):
        with pytest.raises(SettingsError, match="EVENTS_API_KAFKA_CLUSTERS"):
            Settings.from_env({"EVENTS_API_KAFKA_CLUSTERS": bad})


def test_a_build_is_ready_on_its_schema_or_a_newer_one() -> None:
    from events_api.storage.migrate import schema_is_current

    assert schema_is_current("0003", "0003")
    assert schema_is_current("0004", "0003")  # migrations run before code: the old build keeps serving
    assert not schema_is_current("0002", "0003")
    assert not schema_is_current(None, "0003")
