"""`events-api schemas push`: schemas as code against the real server."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from events_api.schemas_push import push
from tests.conftest import ADMIN, ALL_SCOPES

EXAMPLES = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture
def team_key(server: str) -> str:
    """A fresh tenant per test, so pushes do not see each other's versions."""
    tenant = "push-" + secrets.token_hex(4)
    with httpx.Client(base_url=server, headers=ADMIN) as http:
        assert http.post("/v1/tenants", json={"id": tenant}).status_code == 201
        key: str = http.post(f"/v1/tenants/{tenant}/api-keys", json={"scopes": ALL_SCOPES}).json()["key"]
        return key


def _push(directory: Path, server: str, key: str, check: bool = False) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = push(directory, server, key, check_only=check, out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_push_is_idempotent_and_reports_changes(server: str, team_key: str, tmp_path: Path) -> None:
    for example in EXAMPLES.glob("*.json"):
        shutil.copy(example, tmp_path / example.name)
    code, output = _push(tmp_path, server, team_key)
    assert code == 0, output
    assert output.count("registered") == 3
    code, output = _push(tmp_path, server, team_key)
    assert code == 0
    assert output.count("unchanged") == 3

    schema = json.loads((tmp_path / "order.shipped.json").read_text())
    schema["properties"]["note"] = {"type": "string"}  # an optional property: compatible
    (tmp_path / "order.shipped.json").write_text(json.dumps(schema))
    code, output = _push(tmp_path, server, team_key)
    assert code == 0
    assert "registered" in output
    assert " 2 " in output


def test_an_incompatible_change_fails_the_push(server: str, team_key: str, tmp_path: Path) -> None:
    (tmp_path / "thing.made.json").write_text(json.dumps({"type": "object", "properties": {"n": {"type": "number"}}}))
    assert _push(tmp_path, server, team_key)[0] == 0
    (tmp_path / "thing.made.json").write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    code, output = _push(tmp_path, server, team_key, check=True)
    assert code == 1
    assert "incompatible" in output
    assert "/properties/n" in output
    code, output = _push(tmp_path, server, team_key)
    assert code == 1
    assert "incompatible" in output

    (tmp_path / "broken.json").write_text("{not json")
    code, output = _push(tmp_path, server, team_key)
    assert code == 1
    assert "invalid" in output


def test_cli_errors(server: str, tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTS_API_")}

    def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "events_api", "schemas", "push", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert cli(str(tmp_path), "--url", server).returncode == 2  # no key
    refused = cli(str(tmp_path), "--url", server, EVENTS_API_KEY="evk_nope_" + "0" * 64)
    assert refused.returncode == 2
    assert "refused" in refused.stderr
    assert cli(str(tmp_path / "empty"), "--url", server, EVENTS_API_KEY="x").returncode == 2
    unreachable = cli(str(tmp_path), "--url", "http://127.0.0.1:9", EVENTS_API_KEY="x")
    assert unreachable.returncode == 2
    assert "Traceback" not in unreachable.stderr
