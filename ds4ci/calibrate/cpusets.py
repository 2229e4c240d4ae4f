"""One CPU set per gate for gates side by side: the host's CPUs (this process's affinity) cut into disjoint sets.

A gate's server spins worker threads sized by the CPUs it counts (the engine's matvec pools start up to 8 per
pool, spinning before they sleep); two gates side by side then fight over every core. The levers (``LEVERS``):

- ``none``: every gate on every CPU, as before;
- ``affinity``: gate slot i of N runs on set i (``sched_setaffinity`` of the gate, inherited by its servers, through
  :mod:`ds4ci.calibrate.pin`);
- ``affinity+online``: the same, and each server's sandbox shows only that set as online
  (``ds4ci gate --sandbox-cpu-online``), for a program that counts CPUs by the online list, not its affinity.

A slot is held for the whole of one gate and handed to the next gate when it ends, so no two gates that run at
once share a CPU.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
from collections.abc import Iterator, Sequence

from ds4ci.errors import UsageError
from ds4ci.supervisor.cpuonline import cpu_list

NONE, AFFINITY, ONLINE = "none", "affinity", "affinity+online"
LEVERS = (NONE, AFFINITY, ONLINE)
ONLINE_FLAG = "--sandbox-cpu-online"


def split(cpus: Sequence[int], jobs: int) -> list[tuple[int, ...]]:
    """``cpus`` in ``jobs`` disjoint runs of consecutive CPUs, the sizes differing by at most one."""
    ordered = sorted(set(cpus))
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, found {jobs}")
    if len(ordered) < jobs:
        raise UsageError(f"{jobs} gates side by side need at least {jobs} CPUs for disjoint CPU sets; this process "
                         f"may run on {len(ordered)} ({cpu_list(ordered)}): lower --jobs or use --cpu-sets none")
    size, extra = divmod(len(ordered), jobs)
    sets, start = [], 0
    for i in range(jobs):
        end = start + size + (1 if i < extra else 0)
        sets.append(tuple(ordered[start:end]))
        start = end
    return sets


def check_lever(lever: str) -> str:
    if lever not in LEVERS:
        raise UsageError(f"--cpu-sets: expected one of {', '.join(LEVERS)}, found {lever!r}")
    return lever


def pinned(argv: Sequence[str], cpus: Sequence[int] | None) -> list[str]:
    """``argv`` run on ``cpus`` (None: as it is)."""
    if cpus is None:
        return list(argv)
    return [sys.executable, "-m", "ds4ci.calibrate.pin", cpu_list(cpus), "--", *argv]


class Slots:
    """The CPU sets of ``jobs`` gates at a time; ``take`` holds one for a gate (None for every gate with ``none``)."""

    def __init__(self, lever: str, jobs: int, cpus: Sequence[int] | None = None) -> None:
        self.lever = check_lever(lever)
        if jobs < 1:
            raise UsageError(f"--jobs must be at least 1, found {jobs}")
        self.free: queue.Queue[tuple[int, ...] | None] = queue.Queue()
        if lever == NONE:
            for _ in range(jobs):
                self.free.put(None)
        else:
            for one in split(sorted(os.sched_getaffinity(0)) if cpus is None else cpus, jobs):
                self.free.put(one)

    def gate_args(self) -> tuple[str, ...]:
        return (ONLINE_FLAG,) if self.lever == ONLINE else ()

    @contextlib.contextmanager
    def take(self) -> Iterator[tuple[int, ...] | None]:
        one = self.free.get()
        try:
            yield one
        finally:
            self.free.put(one)

    def describe(self, cpus: tuple[int, ...] | None) -> dict[str, str | None]:
        """What a gate's record says: the lever and its CPU set (None: every CPU)."""
        return {"cpu_sets": self.lever, "cpus": None if cpus is None else cpu_list(cpus)}
