"""ds4ci's own overhead: one 3-width gate vs an ideal loop and vs the upstream gate's shape.

Three ways to run the same servers and requests against ``ds4ci-sim`` (startup delay 1.0 s, token
delay 0.005 s, 96 max tokens, 1 prompt, 2 repeats: bench_gate.py's knobs and workspace):

- ``ds4ci gate --widths 2,3,4``: 1 target-only + 3 reference-exact servers, everything checked,
  hashed (through the hash cache, filled by one unmeasured run first) and sealed as evidence;
- bench/ideal_loop.py: the same 4 servers, argv, env and requests, /health polled every 10 ms,
  nothing else;
- bench/upstream_shape.py ``--spec-q q`` for q = 2, 3, 4: the upstream gate's shape, one width per
  run and 2 servers per width (6 starts), /health polled once a second.

Each is timed as a subprocess from exec to exit. Rounds rotate the order of the three; ratios are
taken within a round and the medians of the per-round ratios are reported. ``ideal / upstream`` is
the measured floor of ``ds4ci / upstream``; the analytic floor is 4 servers / 6 servers, each
server ``startup + prompts x repeats x max_tokens x token_delay``, with 0 s (readiness seen at
the first poll after the delay) to 1 s (a whole interval late) of polling per upstream server.

Where ds4ci's own time goes, measured from outside: the gate's stdout and stderr are read
unbuffered (``os.read`` in one thread per pipe, ``PYTHONUNBUFFERED=1`` so the table is not held in
a block buffer until exit) and every line is stamped with ``time.perf_counter()`` as it arrives.
Anchors (the progress messages of ds4ci/gate.py and ds4ci/server.py, the prints of
ds4ci/commands/gate.py):

- exec: just before ``Popen``;
- first line: the first stderr line, ``attempt <id> in <path>`` (``run_gate``, after config load and
  attempt creation); exec -> first line = interpreter, imports, CLI parsing, config, attempt dir;
- first server: the first ``<label>: server pid N starting on`` line; first line -> first server =
  identities (hash cache), revisions, preflight fingerprint (``probing N sources``), arm envs;
- between servers: ``<label>: stopping (SIGTERM`` -> the next ``starting on`` line, less that
  server's own ``stop.stop_s`` (its lifecycle.json) = judging a width + the next server's setup;
- last stop: the last ``stopping (SIGTERM`` line (there is no "stopped" line). last stop ->
  verdict = the last server's stop (``stop_s``, the simulator's own 0.2 s teardown and its 50 ms
  accept poll included) + judging q=4 + ``finish`` (seal, results.json, promotion); the verdict
  line is the first stdout line (the width table, printed once ``run_gate`` has returned);
- verdict -> results: the ``results: <path>`` stdout line (--results-out written);
- results -> exit: process exit as seen by ``wait()`` (interpreter shutdown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, emit, gate_knobs, median, parser, say
from bench_gate import workspace

NAME = "overhead"
HERE = Path(__file__).resolve().parent
WIDTHS = (2, 3, 4)


class Lines:
    """Lines of one pipe, each with the perf_counter time its bytes arrived."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        pending = b""
        while True:
            chunk = os.read(self.fd, 65536)
            now = time.perf_counter()
            if not chunk:
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            self.lines += [(now, line.decode("utf-8", "replace")) for line in complete]
        if pending:
            self.lines.append((time.perf_counter(), pending.decode("utf-8", "replace")))


def _first(lines: list[tuple[float, str]], needle: str) -> float:
    for t, line in lines:
        if needle in line:
            return t
    raise SystemExit(f"anchor {needle!r} not found in the gate's output")


def run_ds4ci(base: list[str], root: Path, tag: str, env: dict[str, str], args: Any) -> dict[str, Any]:
    """One ``ds4ci gate --widths 2,3,4``: wall time and the phases between its output lines."""
    results_out = root / "results" / f"{tag}.json"
    cmd = [str(BIN / "ds4ci"), "gate", *base, "--widths", ",".join(str(q) for q in WIDTHS),
           "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
           "--evidence-dir", str(root / "evidence" / tag), "--results-out", str(results_out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout.fileno()), Lines(proc.stderr.fileno())
    code = proc.wait()
    t_exit = time.perf_counter()
    out.thread.join()
    err.thread.join()
    proc.stdout.close()
    proc.stderr.close()
    if code != 0:
        raise SystemExit(f"gate exited {code}:\n" + "\n".join(line for _, line in err.lines[-40:]))
    doc = json.loads(results_out.read_text())
    evidence = Path(doc["evidence"]["dir"])
    keys = ["target-only", *(f"q{q}" for q in WIDTHS)]
    stop_s = [json.loads((evidence / "servers" / k / "lifecycle.json").read_text())["stop"]["stop_s"] for k in keys]
    starts = [t for t, line in err.lines if ": server pid " in line and " starting on " in line]
    stops = [t for t, line in err.lines if ": stopping (SIGTERM" in line]
    if len(starts) != len(keys) or len(stops) != len(keys):
        raise SystemExit(f"expected {len(keys)} starting/stopping lines, found {len(starts)}/{len(stops)}")
    first_line = err.lines[0][0]
    verdict_line = out.lines[0][0]
    results_line = _first(out.lines, "results: ")
    return {
        "wall_s": t_exit - t0,
        "exec_to_first_line_s": first_line - t0,
        "first_line_to_first_server_s": starts[0] - first_line,
        "between_servers_own_s": sum(starts[i + 1] - stops[i] - stop_s[i] for i in range(len(keys) - 1)),
        "last_stop_to_exit_s": t_exit - stops[-1],
        "last_server_stop_s": stop_s[-1],
        "judge_and_seal_s": verdict_line - stops[-1] - stop_s[-1],
        "verdict_to_results_line_s": results_line - verdict_line,
        "results_line_to_exit_s": t_exit - results_line,
        "in_process_total_s": doc["timings"]["total_s"],
        "hashing_s": doc["timings"]["hashing_s"],
        "servers_run_s": sum(s["run_s"] for s in doc["timings"]["servers"]),
    }


def run_ideal(paths: dict[str, Path], root: Path, tag: str, env: dict[str, str], args: Any) -> float:
    cmd = [sys.executable, str(HERE / "ideal_loop.py"), "--server-bin", str(paths["bin"]), "--target", str(paths["target"]),
           "--draft", str(paths["draft"]), *(a for p in paths_prompts(paths) for a in ("--prompt-file", str(p))),
           "--widths", ",".join(str(q) for q in WIDTHS), "--max-tokens", str(args.max_tokens),
           "--repeats", str(args.repeats), "--log-dir", str(root / "ideal" / tag)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ideal loop exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall


def run_upstream(paths: dict[str, Path], root: Path, tag: str, env: dict[str, str], args: Any) -> tuple[float, list[float]]:
    """The three one-width runs, one after the other: their summed wall time and the 6 servers' ready times."""
    total, ready = 0.0, []
    for q in WIDTHS:
        out = root / "upstream" / f"{tag}-q{q}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(HERE / "upstream_shape.py"), "--server-bin", str(paths["bin"]),
               "--target", str(paths["target"]), "--draft", str(paths["draft"]),
               *(a for p in paths_prompts(paths) for a in ("--prompt-file", str(p))), "--spec-q", str(q),
               "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
               "--log-dir", str(root / "upstream" / f"{tag}-q{q}"), "--json-out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        total += time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"upstream shape q={q} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        ready += [s["ready_s"] for s in json.loads(out.read_text())["servers"]]
    return total, ready


def measured_code(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Which ds4ci the gate subprocess imports (the venv's editable install, or PYTHONPATH) and its commit.

    Probed from an empty directory: ``python -c`` would put the current directory first on sys.path,
    and the console script ``ds4ci`` does not (a checkout's ds4ci/ in the cwd is not what it runs).
    """
    probe = subprocess.run([sys.executable, "-c", "import ds4ci; print(ds4ci.__file__)"], env=env, cwd=cwd,
                           capture_output=True, text=True, check=True)
    package = Path(probe.stdout.strip()).parent
    head = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True, check=False).stdout.strip()
    return {"package": str(package), "commit": head or "unknown", "package_dirty": "yes" if dirty else "no"}


def paths_prompts(paths: dict[str, Path]) -> list[Path]:
    return [v for k, v in sorted(paths.items()) if k.startswith("prompt")]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, help="rounds of (ds4ci, ideal loop, upstream shape); default 3, full 5")
    gate_knobs(p)
    args = p.parse_args()
    rounds = args.rounds or (5 if args.full else 3)
    server_floor = args.startup_delay + args.prompts * args.repeats * args.max_tokens * args.token_delay

    with tempfile.TemporaryDirectory(prefix="ds4ci-bench-overhead-") as tmp:
        root = Path(tmp)
        base = workspace(root, args.prompts)
        models = root / "models"
        paths = {"bin": BIN / "ds4ci-sim", "target": models / "target.gguf", "draft": models / "draft.gguf"}
        paths.update({f"prompt{i:04d}": models / f"prompt{i}.txt" for i in range(args.prompts)})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_", "LUCE_", "DS4SIM_"))}
        env.update({
            "DS4SIM_STARTUP_DELAY": str(args.startup_delay),
            "DS4SIM_TOKEN_DELAY": str(args.token_delay),
            "XDG_CACHE_HOME": str(root / "cache"),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        })
        (root / "probe").mkdir()
        code = measured_code(env, root / "probe")
        say(NAME, f"ds4ci measured: {code['package']} at {code['commit']} (uncommitted changes: {code['package_dirty']})")
        # One unmeasured gate fills the hash cache and the page cache (as bench_gate.py does).
        run_ds4ci(base, root, "warmup", env, args)
        gates: list[dict[str, Any]] = []
        ideal: list[float] = []
        upstream: list[float] = []
        upstream_ready: list[float] = []
        late_per_round: list[int] = []
        for r in range(rounds):
            def do_gate(r: int = r) -> None:
                gates.append(run_ds4ci(base, root, f"r{r}", env, args))

            def do_ideal(r: int = r) -> None:
                ideal.append(run_ideal(paths, root, f"r{r}", env, args))

            def do_upstream(r: int = r) -> None:
                wall, ready = run_upstream(paths, root, f"r{r}", env, args)
                upstream.append(wall)
                upstream_ready.extend(ready)
                late_per_round.append(sum(1 for t in ready if t > args.startup_delay + 0.5))

            order = [do_gate, do_ideal, do_upstream]
            for step in order[r % 3:] + order[: r % 3]:
                step()
            say(NAME, f"round {r + 1}/{rounds}: ds4ci 3 widths {gates[-1]['wall_s']:.2f} s, ideal loop {ideal[-1]:.2f} s, "
                      f"upstream shape (3 runs) {upstream[-1]:.2f} s, {late_per_round[-1]} of its 6 servers seen a poll late")

    walls = [g["wall_s"] for g in gates]
    vs_ideal = [g / i for g, i in zip(walls, ideal, strict=True)]
    vs_upstream = [g / u for g, u in zip(walls, upstream, strict=True)]
    floor = [i / u for i, u in zip(ideal, upstream, strict=True)]
    analytic_best = (4 * server_floor) / (6 * server_floor)
    analytic_worst = (4 * server_floor) / (6 * server_floor + 6 * 1.0)
    phases = {k: median([g[k] for g in gates]) for k in gates[0] if k != "wall_s"}
    late = sum(1 for t in upstream_ready if t > args.startup_delay + 0.5)
    figures: dict[str, Any] = {
        "ds4ci_code": code,
        "settings": {"startup_delay_s": args.startup_delay, "token_delay_s": args.token_delay,
                     "max_tokens": args.max_tokens, "prompts": args.prompts, "repeats": args.repeats,
                     "rounds": rounds, "widths": list(WIDTHS)},
        "wall_ds4ci_s": walls, "wall_ideal_s": ideal, "wall_upstream_s": upstream,
        "median_wall_ds4ci_s": median(walls), "median_wall_ideal_s": median(ideal),
        "median_wall_upstream_s": median(upstream),
        "ds4ci_over_ideal": vs_ideal, "ds4ci_over_upstream": vs_upstream, "ideal_over_upstream": floor,
        "median_ds4ci_over_ideal": median(vs_ideal), "median_ds4ci_over_upstream": median(vs_upstream),
        "median_ideal_over_upstream": median(floor),
        "analytic_floor_no_polling": analytic_best, "analytic_floor_1s_polling_per_server": analytic_worst,
        "upstream_ready_s": upstream_ready, "upstream_servers_seen_a_poll_late": late,
        "upstream_servers_seen_a_poll_late_per_round": late_per_round,
        "ds4ci_phases_median_s": phases, "ds4ci_phases_per_run": gates,
    }
    say(NAME, f"medians of {rounds} rounds: ds4ci {median(walls):.2f} s, ideal loop {median(ideal):.2f} s, "
              f"upstream shape {median(upstream):.2f} s")
    say(NAME, f"ds4ci / ideal loop:     {median(vs_ideal):.3f}  (per round {', '.join(f'{x:.3f}' for x in vs_ideal)})")
    say(NAME, f"ds4ci / upstream shape: {median(vs_upstream):.3f}  (per round {', '.join(f'{x:.3f}' for x in vs_upstream)})")
    say(NAME, f"ideal / upstream shape: {median(floor):.3f}  (the measured floor of the line above)")
    say(NAME, f"analytic floor 4 / 6 servers of {server_floor:.2f} s: {analytic_best:.3f} (no polling cost), "
              f"{analytic_worst:.3f} (+1 s of polling per upstream server); "
              f"upstream servers seen a poll late: {late} of {len(upstream_ready)}")
    say(NAME, "ds4ci phases (median, from its output lines):")
    width = max(len(k) for k in phases)
    for k, v in phases.items():
        say(NAME, f"  {k:<{width}}  {v:7.3f} s")
    emit(NAME, args, figures)


if __name__ == "__main__":
    main()
