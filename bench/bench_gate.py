"""Gate wall time vs its floor, and 3 widths in one gate vs one gate per width (the old script).

The simulator sleeps ``DS4SIM_STARTUP_DELAY`` before it is ready and ``tokens x DS4SIM_TOKEN_DELAY``
per request, and costs about a millisecond otherwise, so the unavoidable time of a gate with W
widths is::

    floor(W) = (1 + W) x startup + (1 + W) x prompts x repeats x max_tokens x token_delay

(one target-only server plus one reference-exact server per width). The baseline is the script
ds4ci replaces: one gate per width, each starting its own target-only and spec server (2 per width),
i.e. ``ds4ci gate --widths q`` once for each q. Rounds alternate the order of the three runs so
drift of the shared machine hits all of them alike; ratios are taken within a round.
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
from _common import BIN, emit, gate_knobs, median, parser, pinned_stand_ins, say, simulator_environment, simulator_server, verdict

NAME = "gate"


def workspace(root: Path, prompts: int) -> list[str]:
    return ["--server-bin", str(simulator_server(root)), *pinned_stand_ins(root, prompts),
            "--runner", "bench", "--startup-timeout", "60", "--request-timeout", "60", "--stop-timeout", "5"]


def run_gate(base: list[str], root: Path, tag: str, widths: str, env: dict[str, str], max_tokens: int,
             repeats: int) -> float:
    """Wall time of one ``ds4ci gate`` subprocess; a non-pass aborts the bench (it would measure nothing)."""
    cmd = [str(BIN / "ds4ci"), "gate", *base, "--widths", widths, "--max-tokens", str(max_tokens),
           "--repeats", str(repeats), "--evidence-dir", str(root / "evidence" / tag),
           "--results-out", str(root / "results" / f"{tag}.json")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gate {widths} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    doc = json.loads((root / "results" / f"{tag}.json").read_text())
    TIMINGS.append(doc["timings"])
    return wall


# results.json timings of every measured run: where the time above the floor goes.
TIMINGS: list[dict[str, Any]] = []


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, help="rounds of (1 width, 3 widths, baseline); default 3, full 5")
    gate_knobs(p)
    args = p.parse_args()
    rounds = args.rounds or (5 if args.full else 3)
    per_server_tokens = args.prompts * args.repeats * args.max_tokens

    def floor(width_count: int) -> float:
        servers = 1 + width_count
        return float(servers * args.startup_delay + servers * per_server_tokens * args.token_delay)

    with tempfile.TemporaryDirectory(prefix="ds4ci-bench-gate-") as tmp:
        root = Path(tmp)
        base = workspace(root, args.prompts)
        env = simulator_environment(root, args.startup_delay, args.token_delay)
        # One unmeasured run fills the hash cache and the page cache, like every run after the first on a runner.
        run_gate(base, root, "warmup", "2", env, args.max_tokens, args.repeats)
        TIMINGS.clear()
        one: list[float] = []
        three: list[float] = []
        baseline: list[float] = []
        for r in range(rounds):
            def do_one(r: int = r) -> None:
                one.append(run_gate(base, root, f"r{r}-w1", "2", env, args.max_tokens, args.repeats))

            def do_three(r: int = r) -> None:
                three.append(run_gate(base, root, f"r{r}-w3", "2,3,4", env, args.max_tokens, args.repeats))

            def do_baseline(r: int = r) -> None:
                baseline.append(sum(run_gate(base, root, f"r{r}-b{q}", str(q), env, args.max_tokens, args.repeats)
                                    for q in (2, 3, 4)))

            order = [do_one, do_three, do_baseline]
            for step in order[r % 3:] + order[: r % 3]:
                step()
            say(NAME, f"round {r + 1}/{rounds}: 1 width {one[-1]:.2f} s, 3 widths {three[-1]:.2f} s, "
                      f"baseline (3 gates) {baseline[-1]:.2f} s")

    f1, f3 = floor(1), floor(3)
    ratios_1 = [w / f1 for w in one]
    ratios_3 = [w / f3 for w in three]
    vs_baseline = [t / b for t, b in zip(three, baseline, strict=True)]
    # Goal: wall <= 1.05 x floor + 1 s.
    goal_1 = median(one) <= 1.05 * f1 + 1.0
    goal_3 = median(three) <= 1.05 * f3 + 1.0
    goal_b = median(vs_baseline) <= 0.70
    servers = [s for t in TIMINGS for s in t["servers"]]
    server_floor = args.startup_delay + per_server_tokens * args.token_delay
    ready_over = median([s["ready_s"] - args.startup_delay for s in servers])
    run_over = median([s["run_s"] - server_floor for s in servers])
    outside = median([t["total_s"] - sum(s["run_s"] for s in t["servers"]) for t in TIMINGS])
    figures: dict[str, Any] = {
        "median_per_server_ready_over_startup_delay_s": ready_over,
        "median_per_server_run_over_its_floor_s": run_over,
        "median_gate_time_outside_servers_s": outside,
        "settings": {"startup_delay_s": args.startup_delay, "token_delay_s": args.token_delay,
                     "max_tokens": args.max_tokens, "prompts": args.prompts, "repeats": args.repeats,
                     "rounds": rounds},
        "floor_1_width_s": f1, "floor_3_widths_s": f3, "floor_baseline_s": 3 * floor(1),
        "wall_1_width_s": one, "wall_3_widths_s": three, "wall_baseline_s": baseline,
        "median_wall_over_floor_1_width": median(ratios_1),
        "median_wall_over_floor_3_widths": median(ratios_3),
        "median_overhead_1_width_s": median(one) - f1,
        "median_overhead_3_widths_s": median(three) - f3,
        "median_overhead_baseline_s": median(baseline) - 3 * f1,
        "median_3_widths_over_baseline": median(vs_baseline),
        "ideal_3_widths_over_baseline": f3 / (3 * f1),
        "goal_floor_1_width_met": goal_1, "goal_floor_3_widths_met": goal_3, "goal_baseline_met": goal_b,
    }
    say(NAME, f"floor: 1 width {f1:.2f} s, 3 widths {f3:.2f} s, baseline {3 * f1:.2f} s")
    say(NAME, f"1 width:  median wall {median(one):.2f} s = {median(ratios_1):.3f} x floor "
              f"(overhead {median(one) - f1:.2f} s); goal <= 1.05 x floor + 1 s: {verdict(goal_1)}")
    say(NAME, f"3 widths: median wall {median(three):.2f} s = {median(ratios_3):.3f} x floor "
              f"(overhead {median(three) - f3:.2f} s); goal <= 1.05 x floor + 1 s: {verdict(goal_3)}")
    say(NAME, f"where it goes (results.json timings, all runs): per server {run_over:.3f} s over its floor "
              f"(of which {ready_over:.3f} s to ready), {outside:.3f} s per gate outside servers (in-process), "
              "plus interpreter start and exit of ds4ci itself")
    say(NAME, f"3 widths / one-gate-per-width baseline: median {median(vs_baseline):.3f} "
              f"(floors alone give {f3 / (3 * f1):.3f}); goal <= 0.70: {verdict(goal_b)}")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
