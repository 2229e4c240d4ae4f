"""Helpers shared by the bench scripts: machine description, medians, figures as JSON.

Every script prints its figures and, with ``--json-out PATH``, writes them as JSON with the
machine and the exact command line, so docs/benchmarks.md can quote where each number came from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci.supervisor import sandbox

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(),
    }


def pinned_stand_ins(root: Path, prompts: int) -> list[str]:
    """Stand-in target and draft files and ``prompts`` prompt files under ``root/models``, as gate flags with
    their SHA-256 pins (what the simulator serves; real model files are not needed to time ds4ci)."""
    models = root / "models"
    models.mkdir(parents=True)
    target, draft = models / "target.gguf", models / "draft.gguf"
    target.write_bytes(b"GGUF bench target" + bytes(range(256)) * 64)
    draft.write_bytes(b"GGUF bench draft" + bytes(range(255, -1, -1)) * 16)
    flags = ["--target", str(target), "--target-sha256", sha256_of(target),
             "--draft", str(draft), "--draft-sha256", sha256_of(draft)]
    for i in range(prompts):
        p = models / f"prompt{i}.txt"
        p.write_text(f"Bench prompt {i}: explain why speculative decoding must roll back rejected drafts.\n")
        flags += ["--prompt-file", str(p), "--prompt-sha256", sha256_of(p)]
    return flags


def simulator_server(root: Path) -> Path:
    """A server program that runs ds4ci's simulator with this interpreter (``simulator_environment`` shows the
    interpreter to the sandbox)."""
    server = root / "sim-server"
    server.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ds4ci.simulator "$@"\n')
    server.chmod(0o755)
    return server


def gate_environment(root: Path) -> dict[str, str]:
    """This environment for a benched gate: no server variables of the caller's, its own hash cache, ds4ci on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DFLASH_", "LUCE_", "DS4SIM_"))}
    env.update({"XDG_CACHE_HOME": str(root / "cache"), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"})
    return env


def simulator_environment(root: Path, startup_delay: float, token_delay: float) -> dict[str, str]:
    """``gate_environment`` for a gate of the simulator: its delays, and this interpreter shown read-only in the
    sandbox (the bench's own command, never a session-wide setting)."""
    env = sandbox.runtime_environment(gate_environment(root))
    env.update({"DS4SIM_STARTUP_DELAY": str(startup_delay), "DS4SIM_TOKEN_DELAY": str(token_delay)})
    return env


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--full", action="store_true", help="the full sizes of docs/benchmarks.md (slower)")
    p.add_argument("--json-out", type=Path, help="also write the figures here as JSON")
    return p


def gate_knobs(p: argparse.ArgumentParser) -> None:
    """The simulated workload every gate bench runs: start-up delay, token time, tokens, prompts, repeats."""
    p.add_argument("--startup-delay", type=float, default=1.0)
    p.add_argument("--token-delay", type=float, default=0.005)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--prompts", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(cmd: Sequence[str], **kwargs: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall time of one subprocess (start to exit) and its completed process."""
    t0 = time.perf_counter()
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, **kwargs)
    return time.perf_counter() - t0, proc


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def emit(name: str, args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """Print the figures (already printed line by line by the caller) and write the JSON if asked."""
    doc = {
        "bench": name,
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "figures": figures,
    }
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(f"[{name}] figures written to {args.json_out}")


def say(name: str, line: str) -> None:
    print(f"[{name}] {line}", flush=True)
