"""Operator commands of `events-api`: maintenance, tenants, keys, dead letters, status (issue 6)."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Add the operator sub-commands to the `events-api` parser."""
