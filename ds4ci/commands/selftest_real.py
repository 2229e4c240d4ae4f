"""``ds4ci selftest --server-bin PATH``: the tiny DS4 models through a real server build, in under a minute.

Writes the tiny models (``ds4ci tiny-models``), runs ``ds4ci gate`` (the CLI, as a subprocess) with
them against the given binary at the default widths, and prints the gate's verdict with its
reasons, each server's start and stop times, and per arm the gate's own judgement: its verdict,
the parity oracle it read the token IDs with (the tiny models' words on builds that print no
trace), the counters and the line families the server printed. The exit code is the gate's: 0
pass, 1 fail, 3 no verdict (a build without the reference-exact mode ends here).
"""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path
from typing import Any

from ds4ci import textsafe
from ds4ci.commands.selftest import GATE_TIMEOUT_S, run_ds4ci
from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.judging.profile import describe_arm

TARGET_KEY = "target-only"


def _gate_argv(models: Path, server_bin: Path, evidence: Path, runner: str) -> list[str]:
    return ["gate", "--config", str(models / "ds4ci.toml"), "--server-bin", str(server_bin),
            "--evidence-dir", str(evidence), "--runner", runner, "--bundle-out", str(evidence / "bundle.tar.gz"),
            "--no-hash-cache", "--json"]


def _timings(attempt: Path) -> list[str]:
    lines = []
    for life_path in sorted((attempt / "servers").glob("*/lifecycle.json")):
        life: dict[str, Any] = json.loads(life_path.read_text(encoding="utf-8"))
        stop = life.get("stop") or {}
        answered = sum(1 for e in life.get("requests", []) if e.get("answered") is True)
        lines.append(f"  {life_path.parent.name}: ready {life.get('ready_s')} s, {answered}/{len(life.get('requests', []))} "
                     f"answered, stopped in {stop.get('stop_s')} s with exit code {stop.get('exit_code')}")
    return lines


def run_real_selftest(server_bin: Path, workdir: Path | None, runner: str | None, seed: int, kind: str = "successor") -> int:
    if not server_bin.is_file():
        raise UsageError(f"--server-bin {server_bin}: no such file; give the dflash_server binary to check")
    from ds4ci.commands.tiny_models import run_tiny_models

    root = workdir or Path(tempfile.mkdtemp(prefix="ds4ci-selftest-real-"))
    models, evidence = root / "models", root / "evidence"
    run_tiny_models(models, seed, kind)
    name = runner or f"selftest-{socket.gethostname()}"
    done = run_ds4ci(_gate_argv(models, server_bin.resolve(), evidence, name), GATE_TIMEOUT_S, root)
    try:
        summary: dict[str, Any] = json.loads(done.stdout)
        attempt = Path(summary["evidence"]["dir"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NoVerdictError(f"ds4ci gate (exit {done.returncode}) printed no JSON summary: {exc}") from exc
    print(f"gate verdict: {summary.get('verdict')} (exit {done.returncode}); evidence: {attempt}")
    for reason in summary.get("reasons", []):
        print(f"  reason: {textsafe.lines(str(reason))[0]}")
    print("servers:")
    print("\n".join(_timings(attempt)))
    print("arms, as the gate judged them:")
    print("\n".join(_arms(attempt)))
    return done.returncode


def _arms(attempt: Path) -> list[str]:
    """One line per arm from the gate's results.json (its verdict, oracle, counters, lines)."""
    try:
        doc: dict[str, Any] = json.loads((attempt / "results.json").read_text(encoding="utf-8"))
        arms = [(TARGET_KEY, doc["target_only"]), *((f"q{w['q']}", w) for w in doc["widths"])]
        return [f"  {describe_arm(label, arm)}" for label, arm in arms]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"  (no results.json to read the arms from: {exc})"]
