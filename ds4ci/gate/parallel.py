"""The arms side by side: which device each arm's server runs on, and running them at once.

A gate has 1 + W arms (target-only and one reference-exact arm per width). ``[gate] devices`` and
``[gate] parallel`` give ``slots``: every device ``parallel`` times, spread device by device (the
first arms each get a device of their own). One thread per slot takes the next arm in order
(target-only first) until none is left, so with as many slots as arms every arm starts at once.

Guarantees:
- each arm is one ``_Run._run_server`` call, exactly as in a sequential run: its own server, port,
  scratch, sandbox, log cap and deadlines, its own lifecycle.json and its own seal;
- an arm that fails (crash, hang to its own deadline, divergence) never stops another: every
  arm runs to its end, and the first unexpected exception is raised only once all have ended;
- SIGTERM/SIGINT of ds4ci (``GateInterrupted``, raised in the main thread while it waits) stops
  every live server (``interrupt``), starts no further arm, waits for every arm to record how
  it ended, then raises; a SIGKILL of ds4ci is the supervisor's (each server's parent-death signal);
- more than one arm on one device only for ds4ci's tiny models (``check_sharing``): a real model
  takes a whole GPU.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ds4ci.errors import NoVerdictError
from ds4ci.gate.interrupt import GateInterrupted
from ds4ci.judging.tinywords import known_target
from ds4ci.log import Logger

if TYPE_CHECKING:  # http.client and psutil are imported when the first server starts
    from ds4ci.gate.server import Server

T = TypeVar("T")
_JOIN_S = 0.1  # how often the main thread wakes while it waits (signals are handled in it, between waits)


def slots(devices: Sequence[str], parallel: int) -> list[str]:
    """Every device ``parallel`` times, device by device: ``cuda:0, cuda:1, cuda:0, cuda:1`` for 2 x 2."""
    return [device for _ in range(parallel) for device in devices]


def concurrent(devices: Sequence[str], parallel: int, arms: int) -> int:
    """How many arms run at once."""
    return min(len(slots(devices, parallel)), arms)


def check_sharing(devices: Sequence[str], parallel: int, arms: int, target_sha256: str | None) -> None:
    """Several arms on one device only with a tiny model of ``ds4ci tiny-models``; NoVerdictError otherwise."""
    if parallel == 1 or arms <= len(devices) or known_target(target_sha256) is not None:
        return
    raise NoVerdictError(
        f"parallel = {parallel} would put {min(parallel, -(-arms // len(devices)))} arms on one device, but the target "
        f"(sha256 {str(target_sha256)[:16]}…) is not one of ds4ci's tiny models, and a real model takes a whole GPU: "
        f"set parallel = 1, or list one device per arm in devices ({arms} arms)"
    )


@dataclass
class Interrupts:
    """What the main thread tells the arms once ds4ci was interrupted; read by each arm's thread."""

    reason: str | None = None
    event: threading.Event = field(default_factory=threading.Event)

    def set(self, reason: str) -> None:
        self.reason = reason
        self.event.set()

    def check(self) -> None:
        """Raise GateInterrupted in an arm's thread once ds4ci was interrupted (before a start or a request)."""
        if self.event.is_set():
            raise GateInterrupted(self.reason or "ds4ci was interrupted; no verdict")


class LiveServers:
    """The servers of arms side by side, for an interrupt to stop: SIGTERM first, SIGKILL ``stop_timeout_s`` later.

    A server may not stop for SIGTERM while a request is in flight, and its arm's thread waits for that
    answer: the kill ends the wait. Each arm's own ``Server.stop()`` then reaps, sweeps and records what
    happened. A server is only signalled through its own supervisor handle: never another arm's."""

    def __init__(self, stop_timeout_s: float, progress: Logger) -> None:
        self.stop_timeout_s = stop_timeout_s
        self.progress = progress
        self._servers: list[Server] = []
        self._lock = threading.Lock()
        self._began = 0.0  # when the interrupt began stopping them (monotonic)
        self._termed: set[int] = set()
        self._killed: set[int] = set()

    def add(self, server: Server) -> None:
        with self._lock:
            self._servers.append(server)

    def stop(self) -> None:
        """Called after the interrupt and again each time the main thread wakes: servers started meanwhile too."""
        now = time.monotonic()
        self._began = self._began or now
        with self._lock:
            live = [s for s in self._servers if s.child is not None and s.exit_code is None]
        for server in live:
            assert server.child is not None
            if id(server) not in self._termed:
                self._termed.add(id(server))
                server.child.send_signal(signal.SIGTERM)
            elif now - self._began > self.stop_timeout_s and id(server) not in self._killed:
                self._killed.add(id(server))
                self.progress(f"{server.label}: still running {self.stop_timeout_s:g} s after the interrupt; SIGKILL")
                server.child.kill()


def run_all(
    arms: Sequence[T],
    devices: Sequence[str],
    run_one: Callable[[T, str], None],
    interrupt: Callable[[], None],
    interrupts: Interrupts,
) -> None:
    """Run every arm, ``run_one(arm, device)``, one thread per slot; raise what the first arm raised, once all ended.

    ``interrupt()`` is called after a GateInterrupted in the main thread and again each time the
    main thread wakes until every arm has ended (a server that started meanwhile is stopped too).
    """
    pending = list(arms)
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()

    def worker(device: str) -> None:
        while True:
            with lock:
                if not pending or interrupts.event.is_set():
                    return
                arm = pending.pop(0)
                index = len(arms) - len(pending) - 1
            try:
                run_one(arm, device)
            except BaseException as exc:  # kept for the main thread; every other arm carries on
                failures[index] = exc

    threads = [threading.Thread(target=worker, args=(d,), name=f"ds4ci-arm-{i}-{d}", daemon=True)
               for i, d in enumerate(devices[: len(arms)])]
    for thread in threads:
        thread.start()
    stopped: GateInterrupted | None = None
    while any(thread.is_alive() for thread in threads):
        try:
            for thread in threads:
                thread.join(_JOIN_S)
            if stopped is not None:
                interrupt()
        except GateInterrupted as exc:
            if stopped is None:
                stopped = exc
                interrupts.set(str(exc))
            interrupt()
    if stopped is not None:
        raise stopped
    for index in sorted(failures):  # run_one records a NoVerdictError itself: what is left is the run's to report
        raise failures[index]


def side_by_side(
    arms: Sequence[T], slots: Sequence[str], run_one: Callable[[T, str], None], live: LiveServers,
    interrupts: Interrupts,
) -> None:
    """``run_all`` in one log group (GitHub's groups do not nest; every line names its arm)."""
    at_once = min(len(slots), len(arms))
    with live.progress.group(f"{len(arms)} arms, {at_once} at a time on {', '.join(dict.fromkeys(slots))}"):
        run_all(arms, slots, run_one, live.stop, interrupts)
