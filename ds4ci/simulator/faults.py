"""Fault switches: ``DS4SIM_FAULTS=name[@scope][,name[@scope]...]``.

Each fault reproduces one way a real server can break the exactness contract (design.md
section 3) or the process lifecycle the gate relies on. A fault acts only in the arm it
concerns: lifecycle faults in every server, target-only faults in the target-only server,
everything else in the speculation server. A ``@scope`` suffix narrows or moves that:
``@any``, ``@target``, ``@spec`` or ``@qN`` (the speculation server of width N only), so a
test can break a single width while the others pass.

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

# name -> (default scope, what it breaks). The text is shown by ``ds4ci-sim --list-faults``.
FAULTS: dict[str, tuple[str, str]] = {
    # lifecycle: the gate must reach "no verdict" (exit 3) and leave no process behind
    "exit-before-ready": (ANY, "exits 1 during start-up, before /health ever answers 200"),
    "exit-mid-request": (ANY, "dies (exit 1) while the first completion is in flight, no response"),
    "hang-request": (ANY, "accepts a completion and never answers it"),
    "ignore-sigterm": (ANY, "ignores SIGTERM; only SIGKILL ends it"),
    "fork-helper": (ANY, "forks a helper that keeps the listening socket, ignores TERM and outlives it"),
    "http-error": (ANY, "answers every completion with HTTP 500 and a JSON error"),
    # contract clause 2: exactly one well-formed trace per request with matching flags
    "no-trace": (SPEC, "ignores DFLASH_DS4_EXACT_VERIFY_TRACE: no trace line"),
    "duplicate-trace": (SPEC, "prints the trace line twice per request"),
    "trace-count-off": (SPEC, "trace declares n one more than the ids it lists"),
    "empty-trace": (SPEC, "trace says n=0 ids=[]"),
    "malformed-trace": (SPEC, "trace ids contain a non-integer"),
    "wrong-flags": (SPEC, "trace reference_exact/speculation flags inverted (do not match the arm)"),
    # clause 3: banner
    "no-banner": (SPEC, "no reference-exact activation banner"),
    # clause 4: one summary with integer counters, steps>0, offered>0, a rejection
    "no-summary": (SPEC, "no speculation summary line"),
    "duplicate-summary": (SPEC, "prints the speculation summary twice per request"),
    "all-accepted": (SPEC, "the draft always agrees: matched == offered, no rejection (tokens exact)"),
    "zero-steps": (SPEC, "summary reports steps=0"),
    "old-summary": (SPEC, "older summary format without matched= and offered="),
    "float-counters": (SPEC, "summary counters printed as floats (matched=46.0 offered=49.0)"),
    "extra-summary-fields": (SPEC, "appends sampling=greedy draft=toy after full_snap (must still pass)"),
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
    # environment family
    "luce-prefix": (ANY, "newer server: reads LUCE_DS4_* first, DFLASH_DS4_* only as fallback"),
}

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
        if name == "luce-prefix" and scope != ANY:
            # The prefix decides which variables say whether this is a speculation arm, so it
            # cannot itself depend on the arm.
            raise UsageError(f"DS4SIM_FAULTS: {entry!r}: luce-prefix acts in every arm; drop the @{scope}")
        faults.append(Fault(name=name, scope=scope))
    return FaultSet(tuple(faults))
