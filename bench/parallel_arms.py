"""Wall time of the gate with its arms side by side, divided by the same gate with its arms one after another.

Both gates run in one invocation, alternating (A B, then B A, ...), ``--rounds`` times; the figure is the
ratio of the medians. Every run must pass (a run that does not measures nothing: the bench stops).

Simulator (default): 1 + 3 arms (widths 2,3,4); sequential is ``--target-device cuda:0``, parallel is
``--devices cuda:0,cuda:1,cuda:2,cuda:3`` (the simulator ignores the device, so four "devices" are four
servers at once on this machine). Goal: ratio <= 0.4.

Real server (``--server-bin BIN --models DIR``, DIR written by ``ds4ci tiny-models DIR``): the gate of
DIR/ds4ci.toml with ``--parallel 1`` against ``--parallel 4`` (four tiny arms on target_device's one GPU),
or ``--devices cuda:0,...`` (one arm per GPU) with ``--devices``. Goal: ratio <= 0.5.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BIN,
    emit,
    gate_environment,
    gate_knobs,
    median,
    parser,
    pinned_stand_ins,
    say,
    simulator_environment,
    simulator_server,
    verdict,
)

NAME = "parallel_arms"
FOUR = "cuda:0,cuda:1,cuda:2,cuda:3"


def simulator_args(root: Path, prompts: int) -> list[str]:
    """Pinned stand-in model files and prompts for the simulator."""
    return ["--server-bin", str(simulator_server(root)), *pinned_stand_ins(root, prompts), "--widths", "2,3,4",
            "--target-device", "cuda:0",
            "--startup-timeout", "120", "--request-timeout", "120", "--stop-timeout", "10"]


def run_gate(base: list[str], extra: list[str], root: Path, tag: str, env: dict[str, str]) -> dict[str, Any]:
    """One ``ds4ci gate`` subprocess: wall time, the arms' placement; a run that does not pass stops the bench."""
    out = root / "results" / f"{tag}.json"
    cmd = [str(BIN / "ds4ci"), "gate", *base, *extra, "--runner", "bench",
           "--evidence-dir", str(root / "evidence" / tag), "--results-out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"[{NAME}] {tag} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    arms = doc.get("arms") or []
    overlap = bool(arms) and max(a["started_at"] for a in arms) < min(a["finished_at"] for a in arms)
    return {"wall_s": wall, "devices": [a["device"] for a in arms], "side_by_side": overlap,
            "ready_s": [s["ready_s"] for s in doc["timings"]["servers"]]}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, help="A/B rounds (default 3, --full 5)")
    p.add_argument("--server-bin", type=Path, help="a real server build (with --models)")
    p.add_argument("--models", type=Path, help="folder written by `ds4ci tiny-models` (with --server-bin)")
    p.add_argument("--parallel", type=int, default=4, help="real server: arms side by side on one device")
    p.add_argument("--devices", help="real server: one arm per device instead, e.g. cuda:0,cuda:1,cuda:2,cuda:3")
    p.add_argument("--workdir", type=Path, help="keep the evidence here (default: a temporary folder)")
    gate_knobs(p)
    args = p.parse_args()
    rounds = args.rounds or (5 if args.full else 3)
    real = args.server_bin is not None or args.models is not None
    if real and (args.server_bin is None or args.models is None):
        p.error("--server-bin and --models go together")
    with tempfile.TemporaryDirectory(prefix="ds4ci-bench-parallel-") as tmp:
        root = (args.workdir or Path(tmp)).absolute()
        root.mkdir(parents=True, exist_ok=True)
        env = gate_environment(root)
        if real:
            base = ["--config", str((args.models / "ds4ci.toml").absolute()), "--server-bin", str(args.server_bin.absolute())]
            sequential = ["--parallel", "1"]
            side = ["--devices", args.devices] if args.devices else ["--parallel", str(args.parallel)]
            goal = 0.5
        else:
            base = [*simulator_args(root, args.prompts), "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats)]
            env = simulator_environment(root, args.startup_delay, args.token_delay)
            sequential, side = [], ["--devices", FOUR]
            goal = 0.4
        run_gate(base, sequential, root, "warmup", env)  # fills the hash cache and the page cache, unmeasured
        runs: dict[str, list[dict[str, Any]]] = {"sequential": [], "parallel": []}
        for r in range(rounds):
            order = [("sequential", sequential), ("parallel", side)]
            for label, extra in order if r % 2 == 0 else order[::-1]:
                runs[label].append(run_gate(base, extra, root, f"r{r}-{label}", env))
            say(NAME, f"round {r + 1}/{rounds}: sequential {runs['sequential'][-1]['wall_s']:.2f} s, "
                      f"parallel {runs['parallel'][-1]['wall_s']:.2f} s")
    seq = median([run["wall_s"] for run in runs["sequential"]])
    par = median([run["wall_s"] for run in runs["parallel"]])
    ratio = par / seq
    say(NAME, "| gate | arms placed | median wall s | runs |")
    say(NAME, "|---|---|---|---|")
    for label, value in (("sequential", seq), ("parallel", par)):
        placed = ", ".join(runs[label][0]["devices"])
        flags = " ".join(sequential if label == "sequential" else side) or "target_device"
        walls = ", ".join(f"{x['wall_s']:.2f}" for x in runs[label])
        say(NAME, f"| {label} ({flags}) | {placed} | {value:.2f} | {walls} |")
    met = ratio <= goal and all(run["side_by_side"] for run in runs["parallel"])
    say(NAME, f"ratio of medians parallel / sequential: {ratio:.3f} (goal <= {goal}): {verdict(met)}")
    emit(NAME, args, {
        "mode": "real" if real else "simulator", "rounds": rounds, "ratio": ratio, "goal": goal, "met": met,
        "median_sequential_s": seq, "median_parallel_s": par, "sequential_args": sequential, "parallel_args": side,
        "runs": runs,
        "settings": {"startup_delay_s": args.startup_delay, "token_delay_s": args.token_delay,
                     "max_tokens": args.max_tokens, "prompts": args.prompts, "repeats": args.repeats}
        if not real else {"server_bin": str(args.server_bin), "models": str(args.models)},
    })


if __name__ == "__main__":
    main()
