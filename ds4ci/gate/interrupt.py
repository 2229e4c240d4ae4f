"""SIGTERM and SIGINT during a gate run: an exception, so every server is stopped and the attempt kept."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from ds4ci.errors import NoVerdictError


class GateInterrupted(NoVerdictError):
    """ds4ci received SIGINT or SIGTERM; servers are stopped and the attempt kept."""


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into an exception so every server is stopped on the way out."""

    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:  # already unwinding: let the cleanup that is running finish
            return
        fired.append(signum)
        raise GateInterrupted(f"ds4ci was interrupted by {signal.Signals(signum).name}; no verdict")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
