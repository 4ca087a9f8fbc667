"""Schemas as code: `events-api schemas push DIR` registers every `DIR/<event_type>.json` through the API.

Idempotent (an unchanged schema is reported as such, no new version), prints a table of what changed,
and exits 1 when any schema is incompatible or invalid, so a team's CI can gate on it. `--check` asks
the API whether each schema would be accepted without registering anything.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

EXIT_OK, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2
_PROGRESS_FROM = 10  # files; fewer are quick enough to need no progress lines


@dataclass(frozen=True, slots=True)
class Outcome:
    event_type: str
    result: str  # registered, unchanged, compatible, incompatible, invalid, error
    version: int | None
    detail: str

    @property
    def refused(self) -> bool:
        return self.result in {"incompatible", "invalid", "error"}


def _problem_detail(response: httpx.Response) -> str:
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    messages = [f"{e.get('pointer', '')}: {e.get('message', '')}" for e in body.get("errors") or []]
    return "; ".join(messages) or str(body.get("detail") or f"HTTP {response.status_code}")


def _outcome(event_type: str, response: httpx.Response, check_only: bool) -> Outcome:
    status = response.status_code
    if status in (401, 403):
        raise PermissionError(_problem_detail(response))
    if check_only and status == 200:
        body = response.json()
        if body["compatible"]:
            return Outcome(event_type, "compatible", None, "")
        return Outcome(event_type, "incompatible", None, "; ".join(body["messages"]))
    if status in (200, 201):
        version = int(response.json()["version"])
        return Outcome(event_type, "registered" if status == 201 else "unchanged", version, "")
    if status == 409:
        return Outcome(event_type, "incompatible", None, _problem_detail(response))
    if status == 422:
        return Outcome(event_type, "invalid", None, _problem_detail(response))
    return Outcome(event_type, "error", None, _problem_detail(response))


def push_one(http: httpx.Client, path: Path, check_only: bool) -> Outcome:
    event_type = path.name.removesuffix(".json")
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        return Outcome(event_type, "invalid", None, f"cannot read {path.name}: {exc}")
    where = "compatibility-check" if check_only else "versions"
    response = http.post(f"/v1/schemas/{event_type}/{where}", json={"schema": schema})
    return _outcome(event_type, response, check_only)


def render(outcomes: list[Outcome], out: TextIO) -> None:
    headers = ("EVENT TYPE", "RESULT", "VERSION", "DETAIL")
    rows = [(o.event_type, o.result, "" if o.version is None else str(o.version), o.detail) for o in outcomes]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:3])]
    for row in [headers, *rows]:
        out.write("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3] + "\n")


def push(
    directory: Path,
    url: str,
    api_key: str,
    *,
    check_only: bool = False,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    transport: httpx.BaseTransport | None = None,
) -> int:
    files = sorted(directory.glob("*.json"))
    if not files:
        err.write(f"events-api schemas push: no *.json files in {directory}\n")
        return EXIT_ERROR
    outcomes: list[Outcome] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30, transport=transport) as http:
            for number, path in enumerate(files, 1):
                if len(files) >= _PROGRESS_FROM:
                    err.write(f"[{number}/{len(files)}] {path.name}\n")
                outcomes.append(push_one(http, path, check_only))
    except PermissionError as exc:
        err.write(f"events-api schemas push: the API key was refused: {exc}\n")
        return EXIT_ERROR
    except httpx.HTTPError as exc:
        err.write(f"events-api schemas push: cannot reach {url}: {exc}\n")
        return EXIT_ERROR
    render(outcomes, out)
    return EXIT_REFUSED if any(o.refused for o in outcomes) else EXIT_OK
