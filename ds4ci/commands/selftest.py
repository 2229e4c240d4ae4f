"""``ds4ci selftest``: the real gate, run twice against the reference server on real kernels.

1. Writes a target, a draft (the target plus 2 % noise) and prompt files, and two wrapper
   "server binaries" that start ``ds4ci-refserver`` exactly like the DS4 server is started.
2. Runs ``ds4ci gate`` as a subprocess (the CLI, not the library) with reference-exact
   speculation: it must pass (exit 0).
3. Runs the same gate with the approximate verifier leaked into the speculative arm only (the
   leak wrapper sets ``DS4REF_LEAK_FUSED_VERIFY=1`` when the arm speculates; the server still
   claims reference-exact verification, so only the token comparison can catch it): it must be
   caught as a fail (exit 1) at a first differing position. In float32 the batched verification
   may round like single-token steps; then the leak is reported as "approximate verifier agreed
   on this stack" instead of a failure of the self-test.
4. Renders both results with ``ds4ci report`` (and ``ds4ci publish --dry-run`` if asked), runs
   ``ds4ci verify`` on both evidence bundles where that command exists, and prints both verdict
   tables, the runner fingerprint and the timings.

Exit 0 only when both outcomes are as expected; 1 when one is not; 2 bad flags; 3 no verdict.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, NoVerdictError, UsageError
from ds4ci.refserver.workload import Workload, write_workload
from ds4ci.supervisor import sandbox

DTYPES = ("bfloat16", "float16", "float32")
GATE_TIMEOUT_S = 3600.0
TOOL_TIMEOUT_S = 300.0
AGREED = "approximate verifier agreed on this stack"
_CLI = ("-c", "from ds4ci.cli import main; main()")


@dataclass
class Arm:
    label: str
    runner: str
    wrapper: Path
    results: Path
    exit_code: int | None = None
    wall_s: float = 0.0
    table: str = ""
    doc: dict[str, Any] | None = None
    verify_exit: int | None = None


@dataclass
class Outcome:
    expected: bool
    text: str
    positions: list[dict[str, Any]] = field(default_factory=list)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_wrapper(path: Path, dtype: str, device: str, leak: bool, command: list[str] | None = None) -> Path:
    """A "server binary" that starts the reference server with this interpreter and every argument as given
    (``command`` replaces ``python -m ds4ci.refserver``, for tests of the wrapper itself)."""
    lines = [
        "#!/bin/sh",
        "# ds4ci self-test: the reference server, started with exactly the DS4 server's arguments.",
        f"export DS4REF_DTYPE={shlex.quote(dtype)}",
    ]
    if device.startswith("cpu"):
        lines.append(f"export DS4REF_THREADS={max(1, min(4, os.cpu_count() or 1))}")
    if leak:
        lines += [
            "# The fault under test: approximate verification in the speculative arm only, still claiming",
            "# reference-exact verification (the gate strips DS4 policy variables, not DS4REF_ ones).",
            'if [ "${DFLASH_DS4_SPEC:-}" = 1 ] || [ "${LUCE_DS4_SPEC:-}" = 1 ]; then',
            "  export DS4REF_LEAK_FUSED_VERIFY=1",
            "fi",
        ]
    program = command or [sys.executable, "-m", "ds4ci.refserver"]
    lines.append(f'exec {shlex.join(program)} "$@"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def gate_argv(work: Workload, arm: Arm, device: str, evidence: Path, widths: str, max_tokens: int,
              source: Path | None) -> list[str]:
    argv = [
        "gate",
        "--server-bin", str(arm.wrapper), "--server-sha256", _sha256(arm.wrapper),
        "--target", str(work.target), "--target-sha256", work.target_sha256,
        "--draft", str(work.draft), "--draft-sha256", work.draft_sha256,
    ]
    for prompt, sha in zip(work.prompts, work.prompt_sha256s, strict=True):
        argv += ["--prompt-file", str(prompt), "--prompt-sha256", sha]
    argv += [
        "--widths", widths, "--max-tokens", str(max_tokens), "--target-device", device,
        "--runner", arm.runner, "--evidence-dir", str(evidence), "--results-out", str(arm.results),
        "--no-hash-cache",
    ]
    if source is not None:
        argv += ["--source-dir", str(source), "--base-ref", "main"]
    return argv


def run_ds4ci(args: list[str], timeout_s: float, cwd: Path, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """``ds4ci ARGS`` as a subprocess of this interpreter, stdout captured; stderr (progress) passes through.

    It runs in the self-test's workspace: ``python -c`` puts its working directory first on the
    import path, and the workspace holds no Python package that could shadow this ds4ci."""
    try:
        return subprocess.run([sys.executable, *_CLI, *args], stdout=subprocess.PIPE, cwd=cwd,
                              stderr=subprocess.DEVNULL if quiet else None, text=True, timeout=timeout_s, check=False,
                              env=sandbox.runtime_environment(os.environ))  # the reference server is ds4ci's Python
    except subprocess.TimeoutExpired as exc:
        raise NoVerdictError(f"ds4ci {args[0]} did not finish within {timeout_s:g} s") from exc
    except OSError as exc:
        raise NoVerdictError(f"cannot run ds4ci {args[0]}: {exc.strerror or exc}") from exc


def _load(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def mismatch_positions(doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every width x prompt cell that recorded a token mismatch: q, prompt, first differing position."""
    found = []
    for width in (doc or {}).get("widths") or []:
        for cell in width.get("prompts") or []:
            mismatch = cell.get("mismatch")
            if isinstance(mismatch, dict) and isinstance(mismatch.get("position"), int):
                found.append({"q": width.get("q"), "prompt": cell.get("prompt_index"), "position": mismatch["position"],
                              "target_ids": mismatch.get("target_ids"), "spec_ids": mismatch.get("spec_ids")})
    return found


def _reasons(doc: dict[str, Any] | None, limit: int = 3) -> str:
    reasons = [str(r).splitlines()[0] for r in (doc or {}).get("reasons") or []]
    return "; ".join(reasons[:limit]) + (f" (+{len(reasons) - limit} more)" if len(reasons) > limit else "") or "none recorded"


def exact_outcome(arm: Arm) -> Outcome:
    if arm.exit_code == EXIT_PASS:
        return Outcome(True, "reference-exact speculation PASSED the gate (exit 0), as expected")
    return Outcome(False, f"reference-exact speculation did NOT pass the gate (exit {arm.exit_code}; expected 0): "
                          f"{_reasons(arm.doc)}")


def leak_outcome(arm: Arm, dtype: str) -> Outcome:
    positions = mismatch_positions(arm.doc)
    if arm.exit_code == EXIT_FAIL and positions:
        where = ", ".join(f"q={p['q']} prompt {p['prompt']} at position {p['position']}" for p in positions)
        return Outcome(True, f"leaked approximate verifier was CAUGHT (exit 1): token IDs differ ({where})", positions)
    if arm.exit_code == EXIT_FAIL:
        return Outcome(False, "the leak run failed (exit 1) but on no token mismatch, so the leak itself was not what "
                              f"the gate caught: {_reasons(arm.doc)}")
    if arm.exit_code == EXIT_PASS and dtype == "float32":
        return Outcome(True, f"{AGREED} (float32: the batched verification rounded like single-token steps; "
                             "the gate passed, correctly, on identical token IDs)")
    if arm.exit_code == EXIT_PASS:
        return Outcome(False, f"leaked approximate verifier was NOT CAUGHT in {dtype} (gate exit 0; expected 1 with a "
                              "first differing position)")
    return Outcome(False, f"the leak run gave no verdict (exit {arm.exit_code}; expected 1): {_reasons(arm.doc)}")


# --------------------------------------------------------------------------------------------------
# VERIFY HOOK: the one place where `ds4ci verify` re-derives both bundles' verdicts. It runs only if
# this ds4ci has a `verify` command; until then each arm's verify_exit stays None ("not available").
# --------------------------------------------------------------------------------------------------
def verify_bundles(arms: list[Arm], cwd: Path) -> str:
    probe = run_ds4ci(["verify", "--help"], TOOL_TIMEOUT_S, cwd, quiet=True)
    if probe.returncode != 0:
        return "ds4ci verify: not available in this ds4ci (skipped)"
    lines = []
    for arm in arms:
        bundle = ((arm.doc or {}).get("evidence") or {}).get("dir")
        if not bundle:
            lines.append(f"ds4ci verify {arm.label}: no evidence bundle recorded")
            continue
        done = run_ds4ci(["verify", str(bundle)], TOOL_TIMEOUT_S, cwd)
        arm.verify_exit = done.returncode
        agrees = done.returncode == arm.exit_code
        lines.append(f"ds4ci verify {arm.label}: exit {done.returncode} "
                     f"({'agrees with' if agrees else 'DISAGREES with'} the gate's exit {arm.exit_code})")
    return "\n".join(lines)


def _fingerprint_lines(doc: dict[str, Any] | None) -> list[str]:
    fp = (doc or {}).get("fingerprint")
    if not isinstance(fp, dict):
        return ["  (no fingerprint recorded)"]
    return [f"  {key}: {json.dumps(fp[key], sort_keys=True)[:600]}" for key in ("host", "gpus", "health", "toolchain")
            if key in fp]


def _timing_lines(arm: Arm) -> list[str]:
    timings = (arm.doc or {}).get("timings") or {}
    out = [f"  {arm.label}: gate wall {arm.wall_s:.1f} s, recorded total {timings.get('total_s')} s, "
           f"hashing {timings.get('hashing_s')} s"]
    for server in timings.get("servers") or []:
        q = f" q={server.get('q')}" if server.get("q") is not None else ""
        out.append(f"    {server.get('arm')}{q}: ready {server.get('ready_s')} s, run {server.get('run_s')} s")
    return out


def _workdir(workdir: Path | None) -> Path:
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="ds4ci-selftest-")).resolve()
    workdir = workdir.resolve()
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise UsageError(f"--workdir {workdir}: expected a new or empty directory, found existing content")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def _checked_device(device: str, dtype: str, prompts: int) -> str:
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if not 1 <= prompts <= 8:
        raise UsageError(f"--prompts {prompts}: expected 1..8")
    if importlib.util.find_spec("torch") is None:
        raise NoVerdictError("ds4ci selftest needs PyTorch for the reference server: install it into this environment "
                             "(pip install torch: a CUDA, ROCm or CPU build)")
    return "cpu:0" if device == "cpu" else device  # the gate takes KIND:INDEX; the reference server reads cpu:N as the CPU


def _arms(work_dir: Path, name: str, dtype: str, device: str) -> list[Arm]:
    return [
        Arm("reference-exact", name, write_wrapper(work_dir / "bin" / "refserver", dtype, device, leak=False),
            work_dir / "exact.results.json"),
        Arm("leaked approximate verifier", f"{name}-leak",
            write_wrapper(work_dir / "bin" / "refserver-leak", dtype, device, leak=True), work_dir / "leak.results.json"),
    ]


def _run_arms(arms: list[Arm], argv_for: Callable[[Arm], list[str]], work_dir: Path) -> None:
    for step, arm in enumerate(arms, 1):
        expected = "PASS" if step == 1 else "caught as FAIL"
        print(f"\n== {step}/2: gate with {arm.label} (expected: {expected})", flush=True)
        t0 = time.monotonic()
        done = run_ds4ci(argv_for(arm), GATE_TIMEOUT_S, work_dir)
        arm.wall_s = time.monotonic() - t0
        arm.exit_code, arm.table, arm.doc = done.returncode, done.stdout, _load(arm.results)
        print(arm.table.rstrip(), flush=True)


def _report_and_verify(arms: list[Arm], work_dir: Path, publish_dry_run: bool) -> tuple[str, str]:
    """``ds4ci report`` (and ``publish --dry-run``) over the results, then ``verify`` over the bundles."""
    present = [str(a.results) for a in arms if a.doc is not None]
    report_line = "ds4ci report: no results.json to render"
    if present:
        rendered = run_ds4ci(["report", *present, "--format", "summary", "--output", str(work_dir / "report.md")],
                             TOOL_TIMEOUT_S, work_dir)
        report_line = f"ds4ci report: exit {rendered.returncode}, {work_dir / 'report.md'}"
    if publish_dry_run and present:
        dry = run_ds4ci(["publish", *present, "--dry-run"], TOOL_TIMEOUT_S, work_dir)
        (work_dir / "publish-dry-run.txt").write_text(dry.stdout, encoding="utf-8")
        print(f"\n== ds4ci publish --dry-run (exit {dry.returncode})\n{dry.stdout.rstrip()}", flush=True)
    return report_line, verify_bundles(arms, work_dir)


def _print_summary(arms: list[Arm], outcomes: list[Outcome], total: float, lines: tuple[str, str]) -> None:
    print("\n== runner fingerprint")
    print("\n".join(_fingerprint_lines(arms[0].doc or arms[1].doc)))
    print("\n== timings")
    for arm in arms:
        print("\n".join(_timing_lines(arm)))
    print(f"  self-test total {total:.1f} s")
    print(f"\n{lines[0]}\n{lines[1]}")
    print("\n== outcome")
    for outcome in outcomes:
        print(f"  [{'as expected' if outcome.expected else 'NOT AS EXPECTED'}] {outcome.text}")


def _summary_json(head: dict[str, Any], arms: list[Arm], outcomes: list[Outcome], total: float) -> dict[str, Any]:
    return {
        **head, "total_s": round(total, 2), "passed": all(o.expected for o in outcomes),
        "arms": [{"label": a.label, "runner": a.runner, "exit_code": a.exit_code, "wall_s": round(a.wall_s, 2),
                  "results": str(a.results), "verify_exit": a.verify_exit} for a in arms],
        "outcomes": [{"expected": o.expected, "text": o.text, "mismatches": o.positions} for o in outcomes],
    }


def run_selftest(
    device: str = "cuda:0",
    runner: str | None = None,
    publish_dry_run: bool = False,
    workdir: Path | None = None,
    dtype: str = "bfloat16",
    prompts: int = 4,
    max_tokens: int = 96,
    widths: str = "2,3,4",
) -> int:
    device = _checked_device(device, dtype, prompts)
    started = time.monotonic()
    name = runner or f"selftest-{socket.gethostname().split('.')[0]}"
    work_dir = _workdir(workdir)
    print(f"== ds4ci selftest: runner {name}, device {device}, dtype {dtype}, widths {widths}, {prompts} prompt(s), "
          f"{max_tokens} tokens; workspace {work_dir}", flush=True)
    work = write_workload(work_dir / "models", prompts)
    source = None
    if publish_dry_run:
        from ds4ci.commands.demo import make_demo_source

        source = make_demo_source(work_dir / "source")
    arms = _arms(work_dir, name, dtype, device)
    _run_arms(arms, lambda arm: gate_argv(work, arm, device, work_dir / "evidence", widths, max_tokens, source), work_dir)
    outcomes = [exact_outcome(arms[0]), leak_outcome(arms[1], dtype)]
    lines = _report_and_verify(arms, work_dir, publish_dry_run)
    total = time.monotonic() - started
    _print_summary(arms, outcomes, total, lines)
    head = {"runner": name, "device": device, "dtype": dtype, "widths": widths, "prompts": prompts,
            "max_tokens": max_tokens, "workspace": str(work_dir)}
    summary = _summary_json(head, arms, outcomes, total)
    (work_dir / "selftest.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    ok = bool(summary["passed"])
    print(f"selftest: {'PASSED' if ok else 'FAILED'}; summary {work_dir / 'selftest.json'}")
    if any(a.exit_code not in (EXIT_PASS, EXIT_FAIL) for a in arms) and not ok:
        return EXIT_ERROR
    return EXIT_PASS if ok else EXIT_FAIL
