"""Placeholder: the `ds4ci revisions` command is being built (owned by its issue's work)."""

from __future__ import annotations

from typing import Any

from ds4ci.errors import UsageError


def run_revisions(*args: Any, **kwargs: Any) -> int:
    raise UsageError("ds4ci revisions is not built yet")
