"""A folder a session-scoped fixture makes once per run, however many xdist workers ask for it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], str | None]) -> Path:
    """The folder ``name`` that ``build`` makes, made once per run: under xdist the first worker that asks builds
    it in the run's shared temporary folder while holding a lock; the others wait and get the same folder (which
    nothing may write to). ``build`` returns None, or why it cannot (every asker then skips with that reason)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's folder, not one worker's
    out, built, refused = shared / name, shared / f"{name}.built", shared / f"{name}.refused"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not built.exists() and not refused.exists():
            why = build(out)
            if why is None:
                built.touch()
            else:
                refused.write_text(why)
    if refused.exists():
        pytest.skip(refused.read_text())
    return out
