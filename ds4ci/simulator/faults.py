"""Fault switches: ``DS4SIM_FAULTS=name[@scope][,name[@scope]...]``.

Each fault reproduces one way a real server can break the exactness contract, one variant of
the real server's build (another log format, another stream, another variable family), or one
way its process lifecycle can go wrong. A fault acts only in the arm it concerns: lifecycle and
build faults in every server, target-only faults in the target-only server, everything else in
the speculation server. A ``@scope`` suffix narrows or moves that: ``@any``, ``@target``,
``@spec`` or ``@qN`` (the speculation server of width N only), so a test can break a single
width while the others pass.

The names are read from ``DS4SIM_FAULTS`` because the gate strips only ``DFLASH_``/``LUCE_``
policy variables; the switch therefore reaches every arm the gate starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ds4ci.errors import UsageError

ANY = "any"
TARGET = "target"
SPEC = "spec"

# The failure lines of the real server's speculative decoder, by fault name.
FAILURE_LINES: dict[str, str] = {
    "fail-snapshot": "[ds4-spec] snapshot failed",
    "fail-snapshot-restore": "[ds4-spec] snapshot restore failed",
    "fail-replay-verify": "[ds4-spec] replay verify failed",
    "fail-verify": "[ds4-spec] verify failed",
    "fail-drafter-forward": "[ds4-spec] drafter forward failed",
    "fail-restore-after-verify": "[ds4-spec] restore after verify failure failed",
    "fail-no-snapshot-backend": "[ds4-spec] no CPU snapshot backend",
}

# name -> (default scope, what it does). The text is shown by ``ds4ci-sim --list-faults``.
FAULTS: dict[str, tuple[str, str]] = {
    # lifecycle: the gate must reach "no verdict" (exit 3) and leave no process behind
    "exit-before-ready": (ANY, "exits 1 at the end of the model load, before it ever listens"),
    "loading-503": (ANY, "listens during the model load and answers 503 until it is loaded"),
    "exit-mid-request": (ANY, "dies (exit 1) while the first completion is in flight, no response"),
    "hang-request": (ANY, "accepts a completion and never answers it (SIGTERM then waits for it forever)"),
    "ignore-sigterm": (ANY, "ignores SIGTERM; only SIGKILL ends it"),
    "slow-teardown": (ANY, "after SIGTERM, answers what is in flight, then frees weights for 120 s"),
    "fork-helper": (ANY, "forks a helper that keeps the listening socket, ignores TERM and outlives it"),
    "setsid-helper": (ANY, "double-forks a setsid daemon outside its process group (exits by itself in 50 s)"),
    "http-error": (ANY, "answers every completion with HTTP 500 and a JSON error"),
    "http-400": (ANY, "refuses every completion with HTTP 400 and a JSON error naming the cause"),
    # build variants: where and how the lines are written, which variables are read
    "luce-prefix": (ANY, "newer server: reads LUCE_DS4_* first, DFLASH_DS4_* only as fallback"),
    "luce-only": (ANY, "newer server: reads LUCE_DS4_* only, DFLASH_DS4_* are ignored"),
    "trace-stdout": (ANY, "writes the trace line to stdout instead of stderr"),
    "summary-after-response": (ANY, "writes banner, summary and trace just after the HTTP response"),
    "draft-load-fails": (SPEC, "the draft does not load: serves without speculation (no banner, no summary)"),
    "fork-dialect": (ANY, "the first public reference-exact build (fork 41ee7d0): banner and a counterless summary, no "
                          "trace in any arm, answers in the tiny models' words; DS4_TIMING prints the compare and "
                          "per-step timing lines"),
    "token-trace-lines": (ANY, "a LUCE-era build: DS4_TOKEN_TRACE prints one [ds4-spec-token] line per emitted token"),
    "ar-fallback": (SPEC, "prints the line of a request decoded without speculation ('DSpark spec loaded but this "
                          "request decodes AR'), all else intact"),
    # contract clause 2: exactly one well-formed trace per request with matching flags
    "no-trace": (SPEC, "ignores the trace variable: no trace line"),
    "duplicate-trace": (SPEC, "prints the trace line twice per request"),
    "trace-count-off": (SPEC, "trace declares n one more than the ids it lists"),
    "empty-trace": (SPEC, "trace says n=0 ids=[]"),
    "malformed-trace": (SPEC, "trace ids contain a non-integer"),
    "wrong-flags": (SPEC, "trace reference_exact/speculation flags inverted (do not match the arm)"),
    # clause 3: banner
    "no-banner": (SPEC, "no reference-exact activation banner"),
    # clause 4: one summary with integer counters, steps>0, offered>0, a rejection, no failure line
    "no-summary": (SPEC, "no speculation summary line"),
    "duplicate-summary": (SPEC, "prints the speculation summary twice per request"),
    "all-accepted": (SPEC, "the draft always agrees: matched == offered, no rejection (tokens exact)"),
    "zero-steps": (SPEC, "summary reports steps=0"),
    "no-counters": (SPEC, "summary without matched=/offered= (the build before reference-exact counters)"),
    "old-summary": (SPEC, "older build: no matched=/offered= and the %.2f/%d mean_accept"),
    "old-mean": (SPEC, "older mean_accept format %.2f/%d (counters present: must still pass)"),
    "float-counters": (SPEC, "summary counters printed as floats (matched=46.0 offered=49.0)"),
    "verify-field": (SPEC, "extra verify=<mode> field before full_snap (must still pass)"),
    "ms-step-tail": (SPEC, "trailing ' sampling=0 sample=0.12 ms/step' text (must still pass)"),
    "extra-summary-fields": (SPEC, "appends sampling=greedy draft=toy after full_snap (must still pass)"),
    **{name: (SPEC, f"prints '{line}' once per request, all else intact") for name, line in FAILURE_LINES.items()},
    # clause 5
    "no-full-snap": (SPEC, "summary reports full_snap=0"),
    # target-only arm must look like plain greedy decoding and be deterministic
    "target-shows-spec": (TARGET, "target-only trace says speculation=1 and a summary is printed"),
    "nondeterministic-target": (TARGET, "each target-only request answers differently"),
    # clause 1: token parity
    "capture-token0": (SPEC, "q=1 feature-capture graph differs: token 0 is the runner-up token"),
    "mismatch-last": (SPEC, "the last token differs from target-only"),
    "leak-fused-verify": (SPEC, "behaves as if DFLASH_DS4_FUSED_VERIFY=1 (approximate, differs)"),
    # clause 7: repeated requests identical
    "second-request-differs": (SPEC, "a prompt asked again answers differently (state leaks)"),
    "repeat-counters-differ": (SPEC, "a prompt asked again gives the same tokens but other counters"),
    # the HTTP answer must agree with the trace: the tokens the trace lists are the ones answered
    "answer-text-differs": (SPEC, "the answer's text differs from the trace's tokens (trace and IDs intact)"),
    "answer-tokens-off": (SPEC, "the answer's usage.completion_tokens is one more than the trace's n"),
    # the exact-differential trace (DFLASH_DS4_EXACT_TRACE_PATH): a DFLASH-era build with its writer
    "exact-trace-writer": (ANY, "a build with the exact-differential trace writer: with DFLASH_DS4_EXACT_TRACE_PATH "
                                "and DFLASH_DS4_EXACT_TRACE_Q=1..4 it appends model_config, then per request "
                                "request_start, a step, tokens (the generated IDs) and request_end"),
    "exact-trace-no-tokens": (SPEC, "the exact-differential trace's second request has no tokens record"),
    "exact-trace-ids-off": (SPEC, "the exact-differential trace's tokens records list one ID fewer than answered"),
    "exact-trace-symlink": (SPEC, "the exact-differential trace path is made a symbolic link to /etc/hostname"),
    "exact-trace-fifo": (SPEC, "the exact-differential trace path is made a FIFO; nothing is written"),
}

# These decide which variables say whether this is a speculation arm, so they cannot depend on the arm.
UNSCOPED = ("luce-prefix", "luce-only")

_ENTRY = re.compile(r"^(?P<name>[a-z0-9-]+)(?:@(?P<scope>any|target|spec|q(?P<q>[0-9]+)))?$")


@dataclass(frozen=True)
class Fault:
    name: str
    scope: str  # "any", "target", "spec" or "qN"


@dataclass(frozen=True)
class Arm:
    """Which kind of server this process is: the gate's target-only or a speculation arm."""

    spec: bool
    q: int


@dataclass(frozen=True)
class FaultSet:
    faults: tuple[Fault, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(f.name if f.scope == FAULTS[f.name][0] else f"{f.name}@{f.scope}" for f in self.faults)

    def active(self, name: str, arm: Arm) -> bool:
        return any(f.name == name and _in_scope(f.scope, arm) for f in self.faults)

    def has(self, name: str) -> bool:
        """Named at all, whatever the scope (for the unscoped build switches)."""
        return any(f.name == name for f in self.faults)


def _in_scope(scope: str, arm: Arm) -> bool:
    if scope == ANY:
        return True
    if scope == TARGET:
        return not arm.spec
    if scope == SPEC:
        return arm.spec
    return arm.spec and scope == f"q{arm.q}"


def parse_faults(text: str) -> FaultSet:
    """Parse the ``DS4SIM_FAULTS`` value; an unknown name or scope is a usage error."""
    faults: list[Fault] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None or match.group("name") not in FAULTS:
            known = ", ".join(sorted(FAULTS))
            raise UsageError(
                f"DS4SIM_FAULTS: unknown fault {entry!r}; expected NAME or NAME@any|target|spec|qN "
                f"with NAME one of: {known}"
            )
        name = match.group("name")
        scope = match.group("scope") or FAULTS[name][0]
        if name in UNSCOPED and scope != ANY:
            raise UsageError(f"DS4SIM_FAULTS: {entry!r}: {name} acts in every arm; drop the @{scope}")
        faults.append(Fault(name=name, scope=scope))
    found = FaultSet(tuple(faults))
    if all(found.has(name) for name in UNSCOPED):
        raise UsageError("DS4SIM_FAULTS: luce-prefix and luce-only contradict each other; choose one")
    return found
