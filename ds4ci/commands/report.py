"""Placeholder: the `ds4ci report` command is being built (owned by its issue's work)."""

from __future__ import annotations

from typing import Any

from ds4ci.errors import UsageError


def run_report(*args: Any, **kwargs: Any) -> int:
    raise UsageError("ds4ci report is not built yet")
