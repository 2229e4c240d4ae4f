"""The sandbox's cost: a 3-width gate under bubblewrap vs an ideal loop, the start-up bwrap saves, the preload.

1. Rounds of three, order rotated: ``ds4ci gate --widths 2,3,4`` with the sandbox (the default where
   bwrap runs), the same gate with ``DS4CI_CONTAINMENT=pid-namespace`` (no sandbox: the Python
   keeper), and bench/ideal_loop.py (the same 4 servers, argv, env and requests; only start, poll
   /health every 10 ms, stop). Ratios within a round, medians of the per-round ratios.
   bench_overhead.py's workload (ds4ci-sim, startup delay 1.0 s, token delay 0.005 s, 96 tokens).
2. Start-up: ``Supervisor.spawn(["true"])`` to its exit, under bwrap (bwrap is the namespace's init)
   vs under the keeper (``pid-namespace``: one more Python interpreter), alternated, 40 each.
3. Preload: the time ``ds4ci.gate.preload.preload()`` takes in a fresh interpreter that has
   imported what a gate has imported by then (``ds4ci.gate.run``), 7 runs.

The simulator is a Python program of this checkout: like the test suite, the run shows this venv
and checkout to the sandbox read-only (``DS4CI_SANDBOX_RO_PATHS``); a real server sees neither.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, emit, gate_knobs, median, parser, say
from bench_gate import workspace
from bench_overhead import run_ds4ci, run_ideal

from ds4ci.supervisor import sandbox

NAME = "sandbox"
ROOT = Path(__file__).resolve().parent.parent
_PRELOAD = (
    "import time, ds4ci.gate.run\n"
    "t = time.perf_counter()\n"
    "from ds4ci.gate.preload import preload\n"
    "preload()\n"
    "print(time.perf_counter() - t)\n"
)


def startup(n: int) -> dict[str, float]:
    """Median seconds from spawn to exit of ``true``: sandboxed, and under the keeper."""
    from ds4ci import supervisor

    sup = supervisor.Supervisor(sweep_stale=False)
    keeper = supervisor.Supervisor("pid-namespace", sweep_stale=False)
    times: dict[str, list[float]] = {"sandbox": [], "keeper": []}
    for _ in range(n):
        for kind, runner, view in (("sandbox", sup, supervisor.View()), ("keeper", keeper, None)):
            t0 = time.perf_counter()
            result = runner.run(["true"], 30, view=view)
            times[kind].append(time.perf_counter() - t0)
            assert result.returncode == 0 and result.containment == ("sandbox" if view else "pid-namespace")
    return {kind: median(values) for kind, values in times.items()}


def preload_cost(runs: int) -> float:
    found = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _PRELOAD], capture_output=True, text=True, check=True)
        found.append(float(out.stdout))
    return median(found)


def _env(root: Path, args: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_", "LUCE_", "DS4SIM_", "DS4CI_"))}
    env.update({
        "DS4SIM_STARTUP_DELAY": str(args.startup_delay), "DS4SIM_TOKEN_DELAY": str(args.token_delay),
        "XDG_CACHE_HOME": str(root / "cache"), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    })
    return sandbox.runtime_environment(env)


def gates(args: Any, rounds: int) -> dict[str, list[float]]:
    walls: dict[str, list[float]] = {"sandbox": [], "keeper": [], "ideal": []}
    with tempfile.TemporaryDirectory(prefix="ds4ci-bench-sandbox-") as tmp:
        root = Path(tmp)
        base = workspace(root, args.prompts)
        models = root / "models"
        paths = {"bin": BIN / "ds4ci-sim", "target": models / "target.gguf", "draft": models / "draft.gguf"}
        paths.update({f"prompt{i:04d}": models / f"prompt{i}.txt" for i in range(args.prompts)})
        env = _env(root, args)
        keeper_env = {**env, "DS4CI_CONTAINMENT": "pid-namespace"}
        run_ds4ci(base, root, "warmup", env, args)  # fills the hash cache and the page cache
        for r in range(rounds):
            steps = [
                ("sandbox", lambda r=r: run_ds4ci(base, root, f"s{r}", env, args)["wall_s"]),
                ("keeper", lambda r=r: run_ds4ci(base, root, f"k{r}", keeper_env, args)["wall_s"]),
                ("ideal", lambda r=r: run_ideal(paths, root, f"i{r}", env, args)),
            ]
            for kind, step in steps[r % 3:] + steps[: r % 3]:
                walls[kind].append(step())
            say(NAME, f"round {r + 1}/{rounds}: sandbox {walls['sandbox'][-1]:.2f} s, keeper {walls['keeper'][-1]:.2f} s, "
                      f"ideal loop {walls['ideal'][-1]:.2f} s")
    return walls


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, help="rounds of (sandboxed gate, keeper gate, ideal loop); default 3, full 5")
    gate_knobs(p)
    args = p.parse_args()
    rounds = args.rounds or (5 if args.full else 3)
    walls = gates(args, rounds)
    over_ideal = [s / i for s, i in zip(walls["sandbox"], walls["ideal"], strict=True)]
    over_keeper = [s / k for s, k in zip(walls["sandbox"], walls["keeper"], strict=True)]
    start = startup(40)
    preload_s = preload_cost(7)
    figures: dict[str, Any] = {
        "wall_s": walls, "sandbox_over_ideal": over_ideal, "sandbox_over_keeper": over_keeper,
        "median_sandbox_over_ideal": median(over_ideal), "median_sandbox_over_keeper": median(over_keeper),
        "goal_sandbox_over_ideal": 1.10, "met": median(over_ideal) <= 1.10,
        "startup_sandbox_s": start["sandbox"], "startup_keeper_s": start["keeper"],
        "startup_keeper_over_sandbox": start["keeper"] / start["sandbox"], "preload_s": preload_s,
    }
    say(NAME, f"sandboxed gate / ideal loop: {median(over_ideal):.3f} (goal <= 1.10); "
              f"sandboxed / keeper gate: {median(over_keeper):.3f}")
    say(NAME, f"spawn-to-exit of `true`: bwrap {start['sandbox'] * 1000:.1f} ms, keeper {start['keeper'] * 1000:.1f} ms; "
              f"preload {preload_s * 1000:.1f} ms")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
