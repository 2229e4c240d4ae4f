"""One bisect step: ``ds4ci gate`` as a child process on one commit's checkout, and what its verdict means here.

The gate is the gate: ``python -I -m ds4ci gate`` (this install, as the service runs it) with the bisect's private
copy of the trusted config (outside the step's tree) and ``--config-base`` the tree's config folder, ``--source-dir``
that tree, the evidence folder the config names (resolved where
the config is, so every step's bundle lands beside the user's own), and ``--json`` for its summary. Its pins,
sandbox, build, evidence and report are its own. Exit 0 is a pass; exit 1 a fail, unless the build failed (the
commit does not build: skipped); exit 3 (no verdict) is skipped; exit 2 (the gate refused its input) stops the
search. SIGINT or SIGTERM while a step runs is passed on to the gate, which keeps the evidence of its attempt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ds4ci.bisect.scratch import ScratchTree
from ds4ci.bisect.search import Outcome
from ds4ci.errors import Ds4ciError
from ds4ci.gate.interrupt import GateInterrupted
from ds4ci.log import Logger
from ds4ci.records import BisectCommit, BisectDifference, BisectStep, Results

STEP_SUMMARY: Final = "GITHUB_STEP_SUMMARY"  # where a gate under Actions appends its report
STOP_GRACE_S: Final = 120.0  # the gate stops its servers (TERM, then KILL after its stop timeout) and seals


@dataclass(frozen=True)
class GateArgs:
    """What every step's gate is given besides its tree."""

    evidence_dir: Path
    runner: str | None = None
    widths: str | None = None


def gate_argv(args: GateArgs, config: Path, base: Path, source: Path) -> list[str]:
    argv = [sys.executable, "-I", "-m", "ds4ci", "gate", "--config", str(config), "--config-base", str(base),
            "--source-dir", str(source), "--evidence-dir", str(args.evidence_dir), "--json"]
    if args.runner is not None:
        argv += ["--runner", args.runner]
    if args.widths is not None:
        argv += ["--widths", args.widths]
    return argv


def _wait(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait()
    except GateInterrupted:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise


def run_gate(argv: list[str], cwd: Path, logs: Path) -> tuple[int, dict[str, Any] | None, str]:
    """The gate's exit code, its --json summary (None when it printed none) and the last line it said. The job
    summary is the bisect's own (every step in one table), not each step's whole report."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "gate.stdout", logs / "gate.stderr"
    env = {k: v for k, v in os.environ.items() if k != STEP_SUMMARY}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                start_new_session=True)
        code = _wait(proc)
    said = [line for line in err.read_text("utf-8", "replace").splitlines() if line.strip()]
    try:
        summary = json.loads(out.read_text("utf-8", "replace"))
    except ValueError:
        summary = None
    return code, summary if isinstance(summary, dict) else None, said[-1][:500] if said else ""


def differences(doc: Results) -> list[BisectDifference]:
    """Every failing width x prompt cell, with the first position where its answers differ."""
    return [
        {"q": width["q"], "prompt_index": cell["prompt_index"],
         "position": cell["mismatch"]["position"] if cell["mismatch"] else None,
         "reason": cell["reasons"][0][:500] if cell["reasons"] else ""}
        for width in doc["widths"] for cell in width["prompts"] if cell["verdict"] == "fail"
    ]


def judge(code: int, doc: Results | None, said: str) -> tuple[Outcome, str]:
    """What one gate run means for the search, and why."""
    first = doc["reasons"][0] if doc is not None and doc["reasons"] else said
    build = doc.get("build") if doc is not None else None
    if code == 0:
        return "pass", "the gate passed"
    if code == 1 and build is not None and build["status"] == "fail":
        return "skip", f"does not build: {build['summary']}"
    if code == 1:
        return "fail", first or "the gate failed"
    if code == 2:
        return "stop", f"the gate refused its input (exit 2): {said}"
    if code == 3:
        return "skip", f"the gate reached no verdict: {first}"
    return "stop", f"the gate ended with status {code} (killed?): {said}"


def load_results(summary: dict[str, Any] | None) -> Results | None:
    """The results.json sealed in the bundle the gate's summary names (read as the report reads any bundle)."""
    evidence = (summary or {}).get("evidence")
    folder = evidence.get("dir") if isinstance(evidence, dict) else None
    if not isinstance(folder, str):
        return None
    from ds4ci.report.docview.load import load_one

    try:
        return load_one(Path(folder))
    except Ds4ciError:
        return None


class StepRunner:
    """The search's ``run_step``: check the commit out in the scratch tree, run the gate there, judge it."""

    def __init__(self, tree: ScratchTree, args: GateArgs, log: Logger) -> None:
        self.tree, self.args, self.log = tree, args, log

    def __call__(self, position: int, commit: BisectCommit) -> BisectStep:
        started = time.monotonic()
        self.log(f"bisect: step {position}: {commit['sha'][:12]} {commit['subject'][:100]}")
        doc: Results | None = None
        code: int | None = None
        try:
            base = self.tree.checkout(commit["sha"])
        except Ds4ciError as exc:
            outcome: Outcome = "skip"
            reason = f"cannot check it out: {exc}"
        else:
            logs = self.tree.temp / "logs" / f"{position:05d}-{commit['sha'][:12]}"
            argv = gate_argv(self.args, self.tree.config_file, base, self.tree.path)
            code, summary, said = run_gate(argv, base, logs)
            doc = load_results(summary)
            outcome, reason = judge(code, doc, said)
        step: BisectStep = {
            **commit, "position": position, "outcome": outcome, "exit_code": code, "reason": reason[:2000],
            "duration_s": round(time.monotonic() - started, 3),
            "evidence": doc["evidence"]["dir"] if doc is not None else None,
            "differences": differences(doc) if doc is not None and outcome == "fail" else [],
        }
        self.log(f"bisect: step {position}: {commit['sha'][:12]}: {outcome}: {reason[:200]} ({step['duration_s']:.1f} s)")
        return step
