"""The online CPU list a sandboxed process sees (``View.cpu_online``): only the CPUs of the caller's affinity.

A program that sizes its thread pools by the CPUs online (glibc's ``get_nprocs`` reads
``/sys/devices/system/cpu/online``, not the affinity) sizes them by its own CPU set when a file listing that
set is bound read-only over the list. It changes only what the process counts, never what it may reach.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

CPU_ONLINE: Final = "/sys/devices/system/cpu/online"
LISTING: Final = ".ds4ci-cpu-online"


def cpu_list(cpus: Iterable[int]) -> str:
    """CPUs as the kernel lists them (``0-3,8``)."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def bind(wanted: bool, scratch: Path) -> list[str]:
    """bwrap's arguments (none unless ``wanted``): a file in the fresh scratch folder (ds4ci's, written before any
    sandboxed process starts, removed with it) listing this process's CPUs, which the sandboxed process inherits,
    bound read-only over the online list."""
    if not wanted:
        return []
    listing = scratch / LISTING
    listing.write_text(cpu_list(os.sched_getaffinity(0)) + "\n", encoding="ascii")
    listing.chmod(0o444)
    return ["--ro-bind", str(listing), CPU_ONLINE]
