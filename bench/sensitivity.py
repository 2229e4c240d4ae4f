#!/usr/bin/env python3
"""Sensitivity of the gate, measured: the real ``ds4ci gate`` against the reference server with one small
planted verifier fault at a time (``ds4ci.refserver.faults``), per model family, and the share caught.

    .venv/bin/python bench/sensitivity.py --trials 8 --json-out /tmp/sensitivity.json

Families: ``refserver`` (the reference server's own self-test models: a Llama-like target and a 2 %
noise draft, byte tokens), ``tiny-random`` (``ds4ci tiny-models --kind random``, the first tiny
models) and ``tiny-successor`` (``ds4ci tiny-models``, the successor structure), the last two served
by the reference server's tiny-model double (``ds4ci.refserver.tinydouble``) through their own pinned
ds4ci.toml (widths 2,3,4, 96 tokens, 2 repeats; the successor config requires coverage). The
refserver family runs the same widths, tokens and repeats with two prompts.

Per family: one unfaulted control (must pass), then for each fault ``--trials`` seeds
(``DS4REF_FAULT_SEED`` = 1..N; the seed picks the first verify step the fault may fire at). A trial
is caught when the gate's verdict is not pass; what caught it is read from results.json: a token
mismatch (parity), an unmet coverage minimum, a missing rejection, or other (the first reason). The
server's fault log says whether the fault fired at all (in any request of the speculative arms).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, sha256_of

from ds4ci.commands.selftest import mismatch_positions
from ds4ci.refserver.faults import FAULTS, SEEDED
from ds4ci.refserver.workload import write_workload
from ds4ci.supervisor import sandbox

FAMILIES = ("refserver", "tiny-random", "tiny-successor")
GATE_TIMEOUT_S = 1800.0
_CLI = ("-c", "from ds4ci.cli import main; main()")
CAUGHT_BY = ("parity", "coverage", "no-rejection", "other")


def write_wrapper(path: Path, fault: str | None, seed: int, log: Path) -> Path:
    """A "server binary": the reference server with this interpreter, the fault only in the speculative arms."""
    lines = ["#!/bin/sh", "export DS4REF_THREADS=1", "export DS4REF_DTYPE=bfloat16"]
    if fault is not None:
        lines += [
            'if [ "${DFLASH_DS4_SPEC:-}" = 1 ] || [ "${LUCE_DS4_SPEC:-}" = 1 ]; then',
            f"  export DS4REF_FAULT={shlex.quote(fault)} DS4REF_FAULT_SEED={seed} "
            f"DS4REF_FAULT_LOG={shlex.quote(str(log))}",
            "fi",
        ]
    lines.append(f'exec {shlex.join([sys.executable, "-m", "ds4ci.refserver"])} "$@"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def family_args(family: str, work: Path) -> list[str]:
    """The gate's model and prompt arguments for one family (written once into ``work``)."""
    if family == "refserver":
        w = write_workload(work / "models", prompts=2)
        argv = ["--target", str(w.target), "--target-sha256", w.target_sha256,
                "--draft", str(w.draft), "--draft-sha256", w.draft_sha256]
        for prompt, sha in zip(w.prompts, w.prompt_sha256s, strict=True):
            argv += ["--prompt-file", str(prompt), "--prompt-sha256", sha]
        return [*argv, "--widths", "2,3,4", "--max-tokens", "96", "--repeats", "2"]
    from ds4ci.tinymodels.bundle import write_tiny_set

    kind = family.removeprefix("tiny-")
    tiny = write_tiny_set(work / "models", seed=1, kind=kind)
    return ["--config", str(tiny.config)]


def classify(doc: dict[str, Any] | None, exit_code: int) -> tuple[str, str]:
    """(outcome, first reason): outcome is 'missed' (pass) or what caught it."""
    if exit_code == 0:
        return "missed", ""
    reasons = [str(r).splitlines()[0] for r in (doc or {}).get("reasons") or []]
    first = reasons[0] if reasons else f"exit {exit_code}, no results.json reasons"
    if mismatch_positions(doc):
        return "parity", first
    if any("coverage minimum" in r for r in reasons):
        return "coverage", next(r for r in reasons if "coverage minimum" in r)
    if any("rejection" in r.lower() for r in reasons):
        return "no-rejection", next(r for r in reasons if "rejection" in r.lower())
    return "other", first


def run_gate(family_argv: list[str], work: Path, label: str, fault: str | None, seed: int) -> dict[str, Any]:
    trial = work / label
    trial.mkdir(parents=True)
    log = trial / "fault.jsonl"
    wrapper = write_wrapper(trial / "bin" / "refserver", fault, seed, log)
    results = trial / "results.json"
    argv = ["gate", *family_argv, "--server-bin", str(wrapper), "--server-sha256", sha256_of(wrapper),
            "--target-device", "cpu:0", "--runner", f"sensitivity-{label}", "--evidence-dir", str(work / "evidence"),
            "--results-out", str(results), "--no-hash-cache"]
    env = sandbox.runtime_environment(os.environ)
    env[sandbox.RW_VARIABLE] = os.pathsep.join(p for p in (env.get(sandbox.RW_VARIABLE, ""), str(trial)) if p)
    started = time.monotonic()
    done = subprocess.run([sys.executable, *_CLI, *argv], cwd=trial, env=env, capture_output=True,
                          text=True, timeout=GATE_TIMEOUT_S, check=False)
    wall = time.monotonic() - started
    try:
        doc = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    fired = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    outcome, reason = classify(doc, done.returncode)
    return {"label": label, "fault": fault, "seed": seed, "exit_code": done.returncode, "outcome": outcome,
            "reason": reason, "fired_requests": len(fired), "wall_s": round(wall, 1),
            "stderr_tail": done.stderr.strip().splitlines()[-1:] if outcome == "other" else []}


def summarise(trials: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fault in FAULTS:
        rows = [t for t in trials if t["fault"] == fault]
        if not rows:
            continue
        caught = [t for t in rows if t["outcome"] != "missed"]
        out[fault] = {
            "trials": len(rows), "caught": len(caught),
            "by": {k: sum(t["outcome"] == k for t in rows) for k in CAUGHT_BY},
            "missed_fired": sum(t["outcome"] == "missed" and t["fired_requests"] > 0 for t in rows),
            "missed_not_fired": sum(t["outcome"] == "missed" and t["fired_requests"] == 0 for t in rows),
        }
    return out


def table(result: dict[str, Any]) -> str:
    lines = ["| family | control | fault | caught | parity | coverage | no rejection | other | missed (fired / never fired) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for family, data in result["families"].items():
        control = data["control"]
        shown = "pass" if control["outcome"] == "missed" else f"NOT pass ({control['outcome']}: {control['reason']})"
        for fault, s in data["summary"].items():
            by = s["by"]
            lines.append(f"| {family} | {shown} | {fault} | {s['caught']}/{s['trials']} | {by['parity']} | "
                         f"{by['coverage']} | {by['no-rejection']} | {by['other']} | "
                         f"{s['missed_fired']} / {s['missed_not_fired']} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=8, help="seeds per family and fault (default 8)")
    p.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    p.add_argument("--faults", default=",".join(SEEDED),
                   help=f"comma-separated, of {', '.join(FAULTS)} (default: the seeded ones, {', '.join(SEEDED)})")
    p.add_argument("--json-out", type=Path, help="also write the figures here as JSON")
    p.add_argument("--workdir", type=Path, help="keep the trials' folders here (default: a new temporary folder)")
    a = p.parse_args()
    families = [f for f in a.families.split(",") if f]
    faults = [f for f in a.faults.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES)) + sorted(set(faults) - set(FAULTS))
    if unknown or a.trials < 1:
        p.error(f"unknown families/faults {unknown} or --trials < 1")
    root = (a.workdir or Path(tempfile.mkdtemp(prefix="ds4ci-sensitivity-"))).resolve()
    result: dict[str, Any] = {"machine": machine(), "command": shlex.join(sys.argv), "trials": a.trials,
                              "families": {}}
    started = time.monotonic()
    for family in families:
        work = root / family
        argv = family_args(family, work)
        control = run_gate(argv, work, "control", None, 0)
        print(f"{family} control: {control['outcome']} exit {control['exit_code']} {control['wall_s']} s "
              f"{control['reason']}", flush=True)
        trials = []
        for fault in faults:
            for seed in range(1, a.trials + 1):
                t = run_gate(argv, work, f"{fault}-{seed}", fault, seed)
                trials.append(t)
                print(f"{family} {fault} seed {seed}: {t['outcome']} (fired in {t['fired_requests']} request(s)) "
                      f"{t['wall_s']} s {t['reason'][:120]}", flush=True)
        result["families"][family] = {"control": control, "trials": trials, "summary": summarise(trials)}
        if a.json_out:
            a.json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    result["total_s"] = round(time.monotonic() - started, 1)
    print(table(result))
    if a.json_out:
        a.json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
