"""One queue per runner (one GPU): requests run one at a time in the order they came.

A request that arrives never cancels one that waits or runs (unlike a GitHub concurrency group,
which keeps one pending job); a full queue refuses the newcomer with :class:`Busy`, saying how many
wait. A request whose caller hung up before its turn is skipped, since nobody would receive it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ds4ci.errors import Ds4ciError


class Busy(Ds4ciError):
    """The runner's queue is full: no verdict (exit 3); try again later."""


@dataclass
class Ticket:
    """One request's place in a queue; ``work`` fills ``outcome`` (or ``failure``) before ``done`` is set."""

    number: int
    payload: Any
    done: threading.Event = field(default_factory=threading.Event)
    gone: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    outcome: Any = None
    failure: str | None = None


class RunnerQueue:
    """``depth`` requests may wait behind the running one; ``work`` runs each on this queue's own thread."""

    def __init__(self, name: str, depth: int, work: Callable[[Ticket], Any]) -> None:
        self.name, self.depth, self._work = name, depth, work
        self._waiting: deque[Ticket] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"queue-{name}", daemon=True)
        self._thread.start()

    def submit(self, ticket: Ticket) -> int:
        """Queue ``ticket``; its position (1: next to run). Busy when ``depth`` requests already wait."""
        with self._cond:
            if self._closed:
                raise Busy(f"runner {self.name}: the service is stopping; try again once it is back")
            if len(self._waiting) >= self.depth:
                raise Busy(f"runner {self.name} is busy: {len(self._waiting)} requests already wait behind the "
                           f"running one (the queue holds {self.depth}); nothing was queued, try again later")
            self._waiting.append(ticket)
            self._cond.notify_all()
            return len(self._waiting)

    def position(self, ticket: Ticket) -> int | None:
        """1-based place among the waiting requests; None once it runs or ran."""
        with self._cond:
            return next((i for i, t in enumerate(self._waiting, 1) if t is ticket), None)

    def close(self) -> None:
        """Take no more requests; those waiting are answered that nothing ran (the running one ends in its time)."""
        with self._cond:
            self._closed = True
            while self._waiting:
                ticket = self._waiting.popleft()
                ticket.failure = "the service stopped before its turn; nothing ran"
                ticket.done.set()
            self._cond.notify_all()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _next(self) -> Ticket | None:
        with self._cond:
            while not self._waiting and not self._closed:
                self._cond.wait()
            return self._waiting.popleft() if self._waiting else None

    def _loop(self) -> None:
        while (ticket := self._next()) is not None:
            if ticket.gone.is_set():
                ticket.failure = "the caller hung up before its turn; nothing ran"
            else:
                ticket.started.set()
                try:
                    ticket.outcome = self._work(ticket)
                except Exception as exc:  # one request's failure never stops the queue
                    ticket.failure = f"{type(exc).__name__}: {exc}"
            ticket.done.set()
