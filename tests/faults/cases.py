"""The fault matrix: every way the gate can be fooled or broken, with the outcome it must reach.

One table, used by ``test_fault_matrix.py`` (asserts each row) and by
``bench/fault_matrix.py`` (runs each row and writes docs/faults.md with what it observed).
Each case is a real ``ds4ci gate`` process against real server processes.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gatekit import DS4CI, FOREIGN_SERVER, Workspace, evidence_listing, processes_mentioning

from ds4ci.supervisor import sandbox


@dataclass(frozen=True)
class Outcome:
    code: int
    verdict: str | None
    reasons: str
    leftovers: list[str]
    evidence: dict[str, list[str]]


@dataclass(frozen=True)
class Case:
    name: str
    clause: str  # which contract clause or lifecycle guarantee it attacks
    expect_code: int
    expect_verdict: str | None  # None: no results.json can exist (e.g. evidence unwritable)
    expect_text: str
    faults: str | None = None
    options: dict[str, object] = field(default_factory=dict)
    run: Callable[[Workspace, Case], Outcome] | None = None  # custom driver
    expect_attempt_left: bool = False


def _outcome(ws: Workspace, code: int, doc: dict[str, object] | None, stderr: str) -> Outcome:
    time.sleep(0.2)  # let a killed group finish dying before we look for leftovers
    # Warnings count too: some faults must end as a pass that says what happened.
    reasons = "\n".join([*doc["reasons"], *doc.get("warnings", [])]) if doc else stderr  # type: ignore[arg-type, attr-defined]
    return Outcome(
        code=code,
        verdict=doc["verdict"] if doc else None,  # type: ignore[arg-type]
        reasons=reasons,
        leftovers=processes_mentioning(str(ws.root)),
        evidence=evidence_listing(ws.root / "evidence"),
    )


def run_default(ws: Workspace, case: Case) -> Outcome:
    options = {"widths": "2", **case.options}
    result = ws.gate(faults=case.faults, **options)
    return _outcome(ws, result.code, result.results, result.stderr)


def run_port_stranger(ws: Workspace, case: Case) -> Outcome:
    """A process outside ds4ci's tree takes the port our server was given, and answers for it.

    The 'server' ds4ci starts only passes its port to a stranger that the test started itself
    (through a FIFO), then idles: the listener on the port is no descendant of the server. Under the
    sandbox the server has a network namespace of its own, so the stranger on the host's loopback is
    out of reach: ``case.options`` names the containment (``DS4CI_CONTAINMENT``).
    """
    fifo = ws.root / "ports.fifo"
    os.mkfifo(fifo)
    stranger = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys\n"
         "port = open(sys.argv[1]).read().split()[0]\n"
         "subprocess.run([sys.executable, sys.argv[2], 'model', '--host', '127.0.0.1', '--port', port], timeout=120)\n",
         str(fifo), str(FOREIGN_SERVER)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    wrapper = ws.root / "stranger-wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = "--port" ] && port="$2"; shift; done\n'
        f'echo "$port" > "{fifo}"\n'
        "exec sleep 60\n"
    )
    wrapper.chmod(0o755)
    ws.server = wrapper
    env = ws.env(DS4CI_CONTAINMENT=str(case.options.get("containment", "auto")))
    try:
        result = ws.gate(widths="2", startup_timeout=5, env=env)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait(timeout=10)
    return _outcome(ws, result.code, result.results, result.stderr)

def run_pin_mismatch(ws: Workspace, case: Case) -> Outcome:
    result = ws.gate(widths="2", target_sha256="f" * 64)
    outcome = _outcome(ws, result.code, result.results, result.stderr)
    started_servers = result.results["timings"]["servers"] if result.results else ["?"]
    if started_servers:
        return Outcome(99, outcome.verdict, "a server was started despite the pin mismatch", [], outcome.evidence)
    return outcome


def run_stale_override(ws: Workspace, case: Case) -> Outcome:
    stale = ws.root / "ds4_awidth"
    stale.write_text("4\n")
    config = ws.root / "ds4ci.toml"
    config.write_text(f'[gate]\nstale_override_files = ["{stale}"]\n')
    result = ws.gate("--config", str(config), widths="2")
    return _outcome(ws, result.code, result.results, result.stderr)


def run_evidence_unwritable(ws: Workspace, case: Case) -> Outcome:
    """Root ignores mode bits, so an evidence path under a regular file stands in for read-only."""
    blocker = ws.root / "not-a-dir"
    blocker.write_text("x")
    result = ws.gate(widths="2", evidence_dir=blocker / "evidence")
    return _outcome(ws, result.code, result.results, result.stderr)


def run_disk_full(ws: Workspace, case: Case) -> Outcome:
    """A file-size limit makes writes fail with EFBIG once the results grow: disk full, simulated."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (6_000, 6_000))

    proc = subprocess.run(
        [DS4CI, "gate", *ws.args(widths="2,3", results_out=None)], env=ws.env(), capture_output=True, text=True,
        timeout=180, check=False, preexec_fn=limit,
    )
    return _outcome(ws, proc.returncode, None, proc.stdout + proc.stderr)


def _start_gate_in_background(ws: Workspace, faults: str | None, **options: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [DS4CI, "gate", *ws.args(widths="2", **options)], env=ws.env(faults), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def _wait_for_request(ws: Workspace, timeout: float = 60) -> None:
    """Until the first request of the run is in flight (its server log exists and has content)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list((ws.root / "evidence" / "attempts").glob("*/servers/*/stderr.log"))
        if any(p.stat().st_size > 0 for p in logs) and list((ws.root / "evidence" / "attempts").glob("*/servers/*/props.json")):
            time.sleep(0.3)
            return
        time.sleep(0.05)
    raise AssertionError("the gate never reached its first request")


def run_interrupted(ws: Workspace, case: Case) -> Outcome:
    """ds4ci gets SIGTERM while a request hangs: servers stopped, attempt kept as failed, exit 3."""
    proc = _start_gate_in_background(ws, "hang-request", request_timeout=120)
    _wait_for_request(ws)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    doc_path = ws.root / "results.json"
    import json

    doc = json.loads(doc_path.read_text()) if doc_path.exists() else None
    return _outcome(ws, proc.returncode, doc, stderr)


def run_killed_then_rerun(ws: Workspace, case: Case) -> Outcome:
    """SIGKILL ds4ci mid-run: its attempt stays in attempts/, no server survives; a re-run passes."""
    proc = _start_gate_in_background(ws, "hang-request@q2", request_timeout=120)
    _wait_for_request(ws)
    proc.kill()
    proc.communicate(timeout=30)
    # The parent-death signal (or, in the sandbox, the watchdog of the namespace's init) reaches the server:
    # wait up to 10 s for it to go, then whatever is still there is a leftover.
    deadline = time.monotonic() + 10
    while (leftovers := processes_mentioning(str(ws.root))) and time.monotonic() < deadline:
        time.sleep(0.1)
    after_kill = evidence_listing(ws.root / "evidence")
    rerun = ws.gate(widths="2")
    outcome = _outcome(ws, rerun.code, rerun.results, rerun.stderr)
    if len(after_kill["attempts"]) != 1 or after_kill["runs"] or after_kill["failed"]:
        return Outcome(98, outcome.verdict, f"unexpected evidence after SIGKILL: {after_kill}", leftovers, outcome.evidence)
    return Outcome(outcome.code, outcome.verdict, outcome.reasons, leftovers + outcome.leftovers, outcome.evidence)


CASES: list[Case] = [
    # process lifecycle: no verdict (exit 3), nothing left running
    Case("server exits before ready", "lifecycle", 3, "error", "before it was ready", "exit-before-ready"),
    Case("server exits mid-request", "lifecycle", 3, "error", "request failed", "exit-mid-request"),
    Case("server hangs on a request", "lifecycle", 3, "error", "no answer within 2 s", "hang-request",
         {"request_timeout": 2}),
    Case("server answers HTTP 500", "lifecycle", 3, "error", "HTTP 500", "http-error"),
    Case("server refuses with HTTP 400", "lifecycle", 3, "error", "prompt is too long for max_ctx", "http-400"),
    # A kill after every request was answered and logged changes no token: a warning, not an error.
    Case("server ignores SIGTERM", "lifecycle", 0, "pass", "killed with SIGKILL after every request was answered",
         "ignore-sigterm", {"stop_timeout": 1}),
    Case("server forks a helper that keeps the port", "lifecycle", 0, "pass",
         "were still running after it stopped and were killed", "fork-helper", {"stop_timeout": 1}),
    Case("port taken by a stranger", "lifecycle", 3, "error", "refusing to talk to a stranger",
         options={"containment": "pid-namespace"}, run=run_port_stranger),
    # under the sandbox the host's loopback is not the server's: the stranger answers nobody
    *([Case("a stranger on the host's port is out of reach", "lifecycle", 3, "error",
            "did not answer /health within 5 s", options={"containment": "sandbox"}, run=run_port_stranger)]
      if sandbox.refusal() is None else []),
    # clause 2: one well-formed trace per request, n = len(ids), not empty, flags match the arm
    Case("no trace line", "2", 1, "fail", "holds 0 [ds4-exact-verify-trace] line(s) for 2 request(s)", "no-trace"),
    Case("duplicate trace", "2", 1, "fail", "holds 4 [ds4-exact-verify-trace] line(s) for 2 request(s)", "duplicate-trace"),
    Case("trace count off by one", "2", 1, "fail", "but lists", "trace-count-off"),
    Case("empty trace", "2", 1, "fail", "trace is empty", "empty-trace"),
    Case("malformed trace", "2", 1, "fail", "malformed trace line", "malformed-trace"),
    Case("wrong mode flags", "2", 1, "fail", "expected reference_exact=1 speculation=1", "wrong-flags"),
    # clause 3: banner
    Case("missing banner", "3", 1, "fail", "activation banner", "no-banner"),
    # clause 4: one summary, integer counters, steps > 0, offered > 0, a rejection
    Case("no summary", "4", 1, "fail", "holds 0 [ds4-spec] gen=... summary line(s) for 2 request(s)", "no-summary"),
    Case("duplicate summary", "4", 1, "fail", "holds 4 [ds4-spec] gen=... summary line(s) for 2 request(s)",
         "duplicate-summary"),
    # the answers agree: nothing is proven wrong, the rejection the proof needs is missing (error, never fail)
    Case("all drafts accepted", "4", 3, "error", "no rejection observed", "all-accepted"),
    Case("zero steps", "4", 1, "fail", "steps=0", "zero-steps"),
    Case("summary without matched/offered (older format)", "4", 1, "fail", "the summary has no matched/offered counters",
         "old-summary"),
    Case("non-integer counters", "4", 1, "fail", "must be a non-negative integer", "float-counters"),
    # clause 5
    Case("full_snap=0", "5", 1, "fail", "full_snap=0", "no-full-snap"),
    # target-only arm
    Case("target-only arm shows speculation", "arm", 1, "fail", "speculation was active in the arm that must be plain",
         "target-shows-spec"),
    Case("target-only nondeterministic", "arm", 3, "error", "target-only decoding is not deterministic",
         "nondeterministic-target"),
    # clause 1: token parity
    Case("mismatch at token 0 (capture path)", "1", 1, "fail", "first differing position 0", "capture-token0"),
    Case("mismatch at the last token", "1", 1, "fail", "first differing position 63", "mismatch-last"),
    Case("approximate verifier leaked into the spec arm", "1", 1, "fail", "token IDs differ", "leak-fused-verify"),
    # clause 7: lifecycle of one server
    Case("second request differs from the first", "7", 1, "fail", "repeated requests on one server gave different token IDs",
         "second-request-differs"),
    Case("second request's counters differ", "7", 1, "fail", "different speculation counters", "repeat-counters-differ"),
    # clause 8: the HTTP answer agrees with the trace
    Case("answer text differs from the trace", "8", 1, "fail", "the server's answer contradicts its own trace",
         "answer-text-differs"),
    Case("answer's completion_tokens differ from n", "8", 1, "fail", "but its trace says n=", "answer-tokens-off"),
    # clause 6 and the runner's readiness
    Case("pin mismatch", "6", 3, "error", "pinned SHA-256 mismatch", run=run_pin_mismatch),
    Case("stale override file present", "policy", 3, "error", "stale override file", run=run_stale_override),
    # evidence
    Case("evidence directory not writable", "evidence", 3, None, "writable directory", run=run_evidence_unwritable),
    Case("disk full while sealing evidence", "evidence", 3, None, "evidence could not be sealed", run=run_disk_full,
         expect_attempt_left=True),
    Case("ds4ci interrupted (SIGTERM) mid-request", "lifecycle", 3, "error", "interrupted by SIGTERM",
         run=run_interrupted),
    Case("ds4ci killed (SIGKILL) mid-run, then run again", "evidence", 0, "pass", "", run=run_killed_then_rerun,
         expect_attempt_left=True),
]
