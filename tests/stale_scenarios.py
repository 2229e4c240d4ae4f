"""Scenarios for the stale-run sweep, run as their own process by tests/e2e/test_supervisor.py.

``python stale_scenarios.py SCENARIO TMPDIR MARKER`` prints one JSON object. The test starts this
inside a PID namespace of its own where it can: any other ds4ci starting on the machine sweeps
leftovers of dead owners too, but never tokens from another PID namespace, so only this
process's own ``sweep_stale()`` can touch what the scenario leaves behind.

- ``fallback-kill9``: a Python parent supervises (subreaper+sweep) a command that starts a
  double-forked setsid daemon and a SIGTERM-ignoring helper; the parent gets SIGKILL.
- ``tokens``: orphans carrying hand-made tokens (dead owner, live owner, foreign namespace, junk).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procscan import MARKER_VARIABLE, carrying, marked, wait_unmarked

from ds4ci.supervisor import TOKEN_VARIABLE, sweep_stale

REPO = Path(__file__).resolve().parents[1]
# This process and its keepers carry the marker too; they are not what a scenario looks for.
SELF = frozenset({os.getpid(), *(p.pid for p in psutil.Process().parents())})

PARENT = """
import os, sys, time
from ds4ci.supervisor import Supervisor
sup = Supervisor("subreaper", sweep_stale=False)
child = sup.spawn(sys.argv[2:])
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print(child.containment, child.pid, child.keeper_pid, child.token, flush=True)
time.sleep(3600)
"""


def wait_until(ready: Path, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not ready.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{ready} never appeared")
        time.sleep(0.02)


def dead(pid: int, within_s: float = 20.0) -> bool:
    try:
        proc = psutil.Process(pid)
        gone, _ = psutil.wait_procs([proc], timeout=within_s)
        return bool(gone) or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_marked(marker: str, within_s: float = 30.0) -> dict[int, tuple[str, dict[str, str]]]:
    """Marked processes by pid: command line and environment, each read once, in a look where every environment
    read still carries the marker (one read inside exec comes back empty until exec has put it in place)."""
    deadline = time.monotonic() + within_s
    while True:
        seen = {}
        for proc in marked(marker, SELF):
            try:
                seen[proc.pid] = (" ".join(proc.cmdline()), proc.environ())
            except psutil.Error:
                continue  # gone since
        if all(environ.get(MARKER_VARIABLE) == marker for _, environ in seen.values()) or time.monotonic() > deadline:
            return seen
        time.sleep(0.02)


def fallback_kill9(tmp: Path, marker: str, command: list[str]) -> dict[str, Any]:
    argv = [sys.executable, "-c", PARENT, str(tmp / "command.ready"), *command]
    parent = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    held, command_pid, keeper_pid, token = parent.stdout.readline().split()
    wait_until(tmp / "daemon.up")
    parent.kill()
    parent.wait()
    result: dict[str, Any] = {"held": held, "token": token}
    result["keeper_dead"] = dead(int(keeper_pid))
    result["command_dead"] = dead(int(command_pid))
    survivors = read_marked(marker)
    result["survivors"] = {pid: cmdline for pid, (cmdline, _) in survivors.items()}
    result["survivor_tokens"] = sorted({str(environ.get(TOKEN_VARIABLE)) for _, environ in survivors.values()})
    killed = sweep_stale()
    result["killed"] = {k.pid: k.reason for k in killed}
    result["left"] = [p.pid for p in wait_unmarked(marker, exclude=SELF)]
    return result


def settled(marker: str, made: dict[str, str]) -> dict[int, tuple[psutil.Process, str]]:
    """The orphans that run ``sleep`` itself, by pid, each with the kind of token its environment carries (read
    once). Not yet: a copy of sh on its way to exec, or one inside exec (its environment reads empty until exec
    has put the new one in place)."""
    found = {}
    for proc in carrying(MARKER_VARIABLE, marker):
        if proc.pid in SELF:
            continue
        try:
            token, argv = proc.environ().get(TOKEN_VARIABLE), proc.cmdline()
        except psutil.Error:
            continue
        which = [name for name, made_token in made.items() if made_token == token]
        if argv[:1] == ["sleep"] and which:
            found[proc.pid] = (proc, which[0])
    return found


def tokens(marker: str) -> dict[str, Any]:
    me = psutil.Process()
    ns = os.stat("/proc/self/ns/pid").st_ino
    made = {
        "reused pid": f"v1:{ns}:{me.pid}:0.00:aa",  # our pid, another start time: that owner is gone
        "live owner": f"v1:{ns}:{me.pid}:{me.create_time():.2f}:bb",
        "other namespace": f"v1:{ns + 1}:{me.pid}:0.00:cc",  # its pids mean other processes here
        "not ours": "something-else",
    }
    for token in made.values():  # orphans, as a killed ds4ci leaves them
        env = {**os.environ, TOKEN_VARIABLE: token}
        subprocess.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 &"], env=env, check=True)
    deadline = time.monotonic() + 30
    while len(orphans := settled(marker, made)) < len(made):
        if time.monotonic() > deadline:
            raise SystemExit(f"the orphans never all ran sleep: {orphans}")
        time.sleep(0.02)
    found = [proc for proc, _ in orphans.values()]
    kind = {pid: which for pid, (_, which) in orphans.items()}
    killed = sweep_stale()
    gone, alive = psutil.wait_procs(found, timeout=2)
    result = {
        "killed": sorted(kind[k.pid] for k in killed if k.pid in kind),
        "gone": sorted(kind[p.pid] for p in gone),
        "alive": sorted(kind[p.pid] for p in alive),
    }
    for proc in alive:
        proc.kill()
    return result


def main() -> None:
    scenario, tmp, marker = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    os.environ[MARKER_VARIABLE] = marker
    if scenario == "fallback-kill9":
        out = fallback_kill9(tmp, marker, sys.argv[4:])
    elif scenario == "tokens":
        out = tokens(marker)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
