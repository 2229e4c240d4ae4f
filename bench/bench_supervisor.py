"""Start-up cost of containment: ``true`` run plainly, under subreaper+sweep, and in a PID namespace.

Three figures per mode, medians over rounds whose order rotates: ``spawn`` (until the command has
exec'd, what a server's start pays), ``run`` (spawn + exit + the final sweep, what a check or probe
pays) and, for comparison, ``subprocess.run(["true"])``. The difference between the namespace and
the plain run is the price of containment.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, median, parser, say

from ds4ci.supervisor import Supervisor, SupervisorError

NAME = "supervisor"


def plain() -> tuple[float, float]:
    t0 = time.perf_counter()
    subprocess.run(["true"], check=True)
    seconds = time.perf_counter() - t0
    return seconds, seconds


def supervised(sup: Supervisor) -> tuple[float, float]:
    t0 = time.perf_counter()
    child = sup.spawn(["true"])
    started = time.perf_counter() - t0
    child.wait()
    child.sweep()
    return started, time.perf_counter() - t0


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args()
    runners: dict[str, Any] = {"plain": plain}
    for mode in ("subreaper", "pid-namespace"):
        sup = Supervisor(mode, sweep_stale=False)
        try:
            sup.run(["true"], 60)
        except SupervisorError as exc:
            say(NAME, f"{mode}: not available here ({exc})")
            continue
        runners[mode] = lambda sup=sup: supervised(sup)
    names = list(runners)
    spawn: dict[str, list[float]] = {n: [] for n in names}
    run: dict[str, list[float]] = {n: [] for n in names}
    for i in range(args.rounds):
        for name in names[i % len(names):] + names[: i % len(names)]:
            started, total = runners[name]()
            spawn[name].append(started)
            run[name].append(total)
    figures: dict[str, Any] = {"rounds": args.rounds}
    for name in names:
        figures[name] = {"spawn_ms": median(spawn[name]) * 1e3, "run_ms": median(run[name]) * 1e3}
        say(NAME, f"{name:14s} spawn {figures[name]['spawn_ms']:6.1f} ms   run+sweep {figures[name]['run_ms']:6.1f} ms"
                  f"   (medians of {args.rounds})")
    if "pid-namespace" in figures:
        extra = figures["pid-namespace"]["run_ms"] - figures["plain"]["run_ms"]
        figures["namespace_overhead_ms"] = extra
        say(NAME, f"pid-namespace costs {extra:.1f} ms more than a plain subprocess.run per command")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
