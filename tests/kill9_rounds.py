"""SIGKILL a real ``ds4ci gate`` at random points, round after round; print what each kill left running.

``python kill9_rounds.py ROOT ROUNDS SEED`` prints one JSON object. Run by
tests/e2e/test_kill9_rounds.py (and by hand with more rounds: see docs/benchmarks.md). This process
is a subreaper and reaps what it adopts, as PID 1 should: it stands in for the runner's init, so a
leftover is a live process, never a zombie that a real init would reap.

Round 0 runs the gate to its end (the time it takes bounds the random kill points); every later
round starts it again and SIGKILLs it after a uniformly random delay in that span. After each kill
every process that names the round's workspace must be gone within ``GRACE_S`` (the kernel ends a
sandbox whose init died at once; nothing here waits for the next ds4ci's stale sweep).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil
from gatekit import DS4CI, Workspace, processes_mentioning

from ds4ci.supervisor import procs, sandbox

GRACE_S = 10.0


def reap() -> int:
    """Reap every exited child (adopted orphans included); how many."""
    count = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return count
        if pid == 0:
            return count
        count += 1


def _scratch_left(tmp: Path) -> int:
    """Scratch folders still there (the watchdogs of killed gates remove theirs, up to GRACE_S after the kill)."""
    deadline = time.monotonic() + GRACE_S
    while (count := len([p for p in tmp.iterdir() if p.name.startswith("ds4ci-scratch-")])) and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


def _left(root: Path) -> list[str]:
    """Live processes naming the workspace, but not this one's parents (whose argv may name it too)."""
    ours = {str(p.pid) for p in psutil.Process().parents()}
    return [line for line in processes_mentioning(str(root)) if line.split(":", 1)[0] not in ours]


def main() -> None:
    root, rounds, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    if not procs.become_subreaper():
        raise SystemExit("cannot become a subreaper here")
    os.environ.update(sandbox.runtime_environment(os.environ))  # the simulator shown read-only, as tests/conftest.py does
    rng = random.Random(seed)
    ws = Workspace.create(root)
    tmp = root / "tmp"
    tmp.mkdir()
    env = {**ws.env(), "TMPDIR": str(tmp)}
    argv = [DS4CI, "gate", *ws.args(widths="2", results_out=root / "results.json")]
    started = time.monotonic()
    full = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    span = time.monotonic() - started
    report: dict[str, object] = {"full_run_exit": full.returncode, "full_run_s": round(span, 2), "rounds": rounds}
    if full.returncode != 0:
        report["full_run_stderr"] = full.stderr[-2000:]
    kills, leftovers, reaped = [], [], 0
    for index in range(1, rounds):
        at = rng.uniform(0.0, span)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(at)
        ended_first = proc.poll() is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + GRACE_S
        while (left := _left(root)) and time.monotonic() < deadline:
            reaped += reap()
            time.sleep(0.05)
        reaped += reap()
        kills.append({"at_s": round(at, 3), "ended_first": ended_first})
        if left:
            leftovers.append({"round": index, "at_s": round(at, 3), "left": left})
            for line in left:  # so later rounds start clean
                with contextlib.suppress(OSError):
                    os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
    report.update({
        "kills": kills, "leftovers": leftovers, "reaped_orphans": reaped,
        "scratch_left": _scratch_left(tmp),
        "total_s": round(time.monotonic() - started, 1),
    })
    print(json.dumps(report))


if __name__ == "__main__":
    main()
