"""SIGTERM and SIGINT during a gate run: an exception, so every server is stopped and the attempt kept.

A second signal while the servers stop is acknowledged on stderr and hurries the stop: every server still
being stopped (``stopping``) gets SIGKILL at once instead of the rest of ``stop_timeout``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Protocol

from ds4ci.errors import NoVerdictError

INTERRUPTED = "ds4ci was interrupted by "  # how every interrupt reason starts: ds4ci's own, no server log says it


class Killable(Protocol):
    def kill(self) -> None: ...


_STOPPING: set[Killable] = set()  # servers between SIGTERM and their exit
_HURRIED: list[int] = []  # the second signal, once it came: every later stop is a SIGKILL at once


def _kill(child: Killable) -> None:
    with contextlib.suppress(Exception):  # gone meanwhile: the stop in progress reaps it
        child.kill()


@contextlib.contextmanager
def stopping(child: Killable) -> Iterator[None]:
    """While ``child`` is being stopped, a second SIGINT/SIGTERM (before or during the stop) kills it at once."""
    _STOPPING.add(child)
    if _HURRIED:
        _kill(child)
    try:
        yield
    finally:
        _STOPPING.discard(child)


def _hurry(signum: int) -> None:
    _HURRIED.append(signum)
    sys.stderr.write(f"ds4ci: {signal.Signals(signum).name} again: no more waiting; every server still stopping "
                     "gets SIGKILL now\n")
    sys.stderr.flush()
    for child in list(_STOPPING):
        _kill(child)


class GateInterrupted(NoVerdictError):
    """ds4ci received SIGINT or SIGTERM; servers are stopped and the attempt kept."""


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into an exception so every server is stopped on the way out."""

    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:  # already unwinding: the cleanup that is running finishes, without waiting on a server
            fired.append(signum)
            _hurry(signum)
            return
        fired.append(signum)
        raise GateInterrupted(f"{INTERRUPTED}{signal.Signals(signum).name}; no verdict")

    _HURRIED.clear()
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        _HURRIED.clear()
        for sig, old in previous.items():
            signal.signal(sig, old)
