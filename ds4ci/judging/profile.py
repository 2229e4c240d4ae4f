"""The evidence profile of one arm: which of the known line families its server printed, and how often.

It says what a build can prove (docs/protocol.md): the strict dialect's trace and countered
summary, the reference-exact banner, the counterless summary in each variant, the per-step and
per-token lines, the agreement lines, the fall-back to plain decoding, and how many answers said
``usage.spec_decode_ran: true``. Counted from the scans judging already made; nothing is read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ds4ci.judging.answer import Answer
from ds4ci.judging.protocol import LINE_FAMILIES, MALFORMED, LogScan

SPEC_DECODE_RAN = "spec_decode_ran"
MALFORMED_FAMILY = "malformed"
KEYS = (*LINE_FAMILIES, MALFORMED_FAMILY, SPEC_DECODE_RAN)


def arm_profile(scans: Sequence[LogScan], answers: Sequence[Answer | None]) -> dict[str, int]:
    """Every family with its count (zeros included, so two profiles always have the same keys)."""
    counts = dict.fromkeys(KEYS, 0)
    for scan in scans:
        for record in scan.records:
            family = MALFORMED_FAMILY if record.kind == MALFORMED else record.family
            counts[family] += 1
    counts[SPEC_DECODE_RAN] = sum(1 for a in answers if a is not None and a.spec_decode_ran is True)
    return counts


def shown(profile: Mapping[str, int]) -> str:
    """The families an arm printed, for one line of a report: ``banner x4, summary-plain x4``."""
    return ", ".join(f"{k} x{v}" for k, v in profile.items() if v) or "none of the known lines"


def describe_arm(label: str, arm: Mapping[str, Any]) -> str:
    """One line for an arm of results.json (target-only or a width): its verdict, oracle, counters and lines."""
    oracle = arm.get("oracle", "server token trace") or "none (the build prints no token IDs)"
    parts = [f"{label}: {arm['verdict']}", f"parity oracle: {oracle}"]
    cells = [c for c in arm.get("prompts", []) if "matched" in c]
    if cells:
        counters = "; ".join(
            f"prompt {c['prompt_index']}: matched {c['matched']} of offered {c['offered']}"
            if c["matched"] is not None else f"prompt {c['prompt_index']}: none"
            for c in cells
        )
        source = next((c.get("counters") for c in cells if c.get("counters")), None)
        parts.append(f"counters {source or 'none'} ({counters})")
    if "evidence" in arm:
        parts.append(f"lines: {shown(arm['evidence'])}")
    return "; ".join(parts)
