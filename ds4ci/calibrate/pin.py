"""``python -m ds4ci.calibrate.pin CPUS -- COMMAND...``: run COMMAND on the CPUs listed (``0-3,8``).

The affinity is set on this process, then COMMAND replaces it (``execv``): it and every process it starts
(the gate, its sandboxes, its servers) inherit the set. Exit 2 with a message when the list cannot be read or
set; 127 when COMMAND cannot be started.
"""

from __future__ import annotations

import os
import sys


def parse(text: str) -> set[int]:
    """``0-3,8`` as a set of CPU numbers; ValueError when it is not such a list."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if first < 0 or last < first:
            raise ValueError(f"{part!r} is not a CPU or a range of CPUs")
        cpus.update(range(first, last + 1))
    return cpus


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m ds4ci.calibrate.pin CPUS -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        os.sched_setaffinity(0, parse(argv[0]))
    except (ValueError, OSError) as exc:
        print(f"ds4ci.calibrate.pin: cannot run on CPUs {argv[0]!r}: {exc}", file=sys.stderr)
        return 2
    try:
        os.execv(argv[2], argv[2:])  # noqa: S606 - the caller's own command, by absolute path
    except OSError as exc:
        print(f"ds4ci.calibrate.pin: cannot start {argv[2]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
