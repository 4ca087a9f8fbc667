"""The examples of `sdk/README.md` run as written, against the real server, with a tenant that has the
example schemas of `schemas/` (what `make dev` registers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.sdk.conftest import create_tenant

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "sdk" / "README.md").read_text(), re.DOTALL)


def test_the_readme_has_the_promised_examples() -> None:
    text = "\n".join(BLOCKS)
    for example in (
        "EventsClient(",
        "AsyncEventsClient(",
        "publish_batch(",
        "ValidationError",
        "spool_path=",
        "stage(",
    ):
        assert example in text


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{n}" for n in range(len(BLOCKS))])
def test_a_readme_example_runs(block: str, server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = {path.stem: json.loads(path.read_text()) for path in (ROOT / "schemas").glob("*.json")}
    tenant = create_tenant(server, schemas=schemas)
    monkeypatch.setenv("EVENTS_API_URL", server)
    monkeypatch.setenv("EVENTS_API_KEY", tenant.key)
    monkeypatch.chdir(tmp_path)  # the spool and SQLite files of the examples land here
    exec(compile(block, "sdk/README.md", "exec"), {"__name__": "__main__"})
