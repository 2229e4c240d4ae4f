"""SIGTERM and SIGINT during a gate run: an exception, so every server is stopped and the attempt kept.

A second signal while the servers stop is acknowledged on stderr and hurries the stop: every server still
being stopped (``stopping``) gets SIGKILL at once instead of the rest of ``stop_timeout``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
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
def signals_raise(*, held: bool = False) -> Iterator[Callable[[], None]]:
    """Turn SIGTERM/SIGINT into an exception so every server is stopped on the way out.

    It yields ``check``: it raises GateInterrupted where a signal came and its exception did not get through
    (a helper that reads "no verdict" as "no answer", such as "is this a git work tree?", swallowed it), so
    the caller stops at its next step. With ``held``, a signal is only kept until the first ``check`` (called
    inside the caller's ``try``; every signal after raises at once), so one that comes while the attempt is
    being created still stops the run through its cleanup. One kept and never checked raises on the way out.
    """

    fired: list[int] = []
    kept: list[int] = []
    live = [not held]

    def interrupted(signum: int) -> GateInterrupted:
        fired.append(signum)
        return GateInterrupted(f"{INTERRUPTED}{signal.Signals(signum).name}; no verdict")

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:  # already unwinding: the cleanup that is running finishes, without waiting on a server
            fired.append(signum)
            _hurry(signum)
            return
        if not live[0]:
            kept.append(signum)
            return
        raise interrupted(signum)

    def check() -> None:
        live[0] = True
        if kept or fired:
            raise interrupted((fired or kept)[0])

    _HURRIED.clear()
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield check
    finally:
        _HURRIED.clear()
        for sig, old in previous.items():
            signal.signal(sig, old)
    if kept and not live[0]:
        raise interrupted(kept[0])
