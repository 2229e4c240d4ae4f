"""Finding a test's processes on the host with psutil, by a unique marker in their argv or environment.

Pids written by the command itself (``$$``, ``$!``) are pids of its PID namespace when the
supervisor holds one, so tests look processes up from the host side instead.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from ds4ci.supervisor import Supervisor

MARKER_VARIABLE = "DS4CI_TEST_MARKER"


def new_marker() -> str:
    return f"ds4ci-test-{uuid.uuid4().hex}"


def marked(marker: str, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line or environment contains ``marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid in exclude or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in arg for arg in proc.cmdline()) or any(marker in v for v in proc.environ().values()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def carrying(variable: str, value: str) -> list[psutil.Process]:
    """Live processes whose environment has ``variable=value``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(variable) == value:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def describe(procs: list[psutil.Process]) -> str:
    lines = []
    for proc in procs:
        try:
            lines.append(f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())}")
        except psutil.Error:
            lines.append(f"{proc.pid} (gone)")
    return "; ".join(lines) or "none"


def wait_unmarked(marker: str, within_s: float = 20.0, exclude: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Wait for every marked process to be gone (the kernel finishing kills); return what is left."""
    deadline = time.monotonic() + within_s
    while True:
        left = marked(marker, exclude)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


_namespace_refusal: list[str] = []


def namespace_refusal() -> str | None:
    """Why the kernel refuses a PID namespace here (checked once by starting ``true``), or None."""
    from ds4ci.supervisor import Supervisor, SupervisorError

    if not _namespace_refusal:
        try:
            Supervisor("pid-namespace", sweep_stale=False).run(["true"], 60)
            _namespace_refusal.append("")
        except SupervisorError as exc:
            _namespace_refusal.append(str(exc))
    return _namespace_refusal[0] or None


def supervisor_or_skip(mode: str) -> Supervisor:
    """A supervisor forced to ``mode``; skips the test if that is a PID namespace the kernel refuses."""
    import pytest

    from ds4ci.supervisor import Supervisor

    if mode == "pid-namespace":
        refusal = namespace_refusal()
        if refusal:
            pytest.skip(f"the kernel refuses a PID namespace here: {refusal}")
    return Supervisor(mode, sweep_stale=False)
