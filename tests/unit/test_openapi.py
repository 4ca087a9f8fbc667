"""The committed openapi.yaml is what the code generates, and it documents every operation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BODILESS = {("/v1/dead-letters/{event_id}/redrive", "post")}


def _generated() -> str:
    result = subprocess.run(
        [sys.executable, "-m", "events_api", "openapi"], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


def test_committed_document_matches_the_code() -> None:
    assert (ROOT / "openapi.yaml").read_text() == _generated(), "run `make openapi` and commit openapi.yaml"


def test_every_operation_is_documented() -> None:
    document: dict[str, Any] = yaml.safe_load(_generated())
    assert document["openapi"].startswith("3.1")
    operations = [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]
    assert len(operations) >= 11
    for path, method, operation in operations:
        assert operation.get("summary"), (path, method)
        success = [code for code in operation["responses"] if code.startswith("2")]
        assert success, (path, method)
        if path.startswith("/v1/"):
            assert {"401", "403"} <= operation["responses"].keys(), (path, method)
            for code, response in operation["responses"].items():
                if code[0] in "45":
                    assert "application/problem+json" in response["content"], (path, method, code)
        if method in {"post", "put"} and path.startswith("/v1/") and (path, method) not in BODILESS:
            assert "requestBody" in operation, (path, method)
    publish = document["paths"]["/v1/events"]["post"]
    assert {p["name"] for p in publish["parameters"]} >= {"Idempotency-Key"}
    assert {"Location", "Idempotent-Replayed"} <= publish["responses"]["202"]["headers"].keys()
    assert set(publish["requestBody"]["content"]) == {"application/json", "application/cloudevents+json"}
