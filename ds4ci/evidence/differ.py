"""How a recorded results.json differs from the document its sealed files derive.

Within one schema version every leaf must agree (a difference is an edit: the bundle does not
verify). Across versions (a bundle sealed by an older ds4ci, read through ``convert``) the judged
fields (``convert.JUDGED``) follow today's rules and may differ: that is a finding, reported as the
first verdict leaf that differs; every copied field must still agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ds4ci.evidence import convert
from ds4ci.records import Results, WidthResult


def _shown(value: object) -> str:
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:79] + "…"


_ABSENT = object()


def first_difference(recorded: object, derived: object, path: str = "") -> str | None:
    """The first key path where two JSON documents differ, as "PATH recorded X, derived Y" (None: equal)."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        for key in sorted(set(recorded) | set(derived)):
            found = first_difference(recorded.get(key, _ABSENT), derived.get(key, _ABSENT), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(derived, list):
        for index in range(max(len(recorded), len(derived))):
            a = recorded[index] if index < len(recorded) else _ABSENT
            b = derived[index] if index < len(derived) else _ABSENT
            found = first_difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if recorded is _ABSENT or derived is _ABSENT or json.dumps(recorded) != json.dumps(derived):
        return f"{path or '(top level)'} recorded {_shown(recorded)}, derived {_shown(derived)}"
    return None


def compare(recorded: Results, derived: Results) -> list[str]:
    """How results.json differs from the document derived from the sealed files (empty: identical)."""
    difference = first_difference(recorded, derived)
    if difference is None:
        return []
    problems: list[str] = []
    if recorded["verdict"] != derived["verdict"]:
        problems.append(f"overall verdict recorded {recorded['verdict']}, recomputed {derived['verdict']}")
    got = {w["q"]: w for w in recorded["widths"]}
    want = {w["q"]: w for w in derived["widths"]}
    for q in sorted(set(got) | set(want)):
        if q not in got:
            problems.append(f"q={q}: in the evidence but missing from results.json")
        elif q not in want:
            problems.append(f"q={q}: in results.json but without server evidence")
        elif got[q] != want[q]:
            problems.append(_width_difference(q, got[q], want[q]))
    return [f"results.json differs from what its sealed files derive: {difference}", *problems]


def _differing_keys(got: Mapping[str, object], want: Mapping[str, object]) -> list[str]:
    """The keys of two records whose values differ (a record's key set is fixed, so ``get`` only pairs them)."""
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


def _width_difference(q: int, got: WidthResult, want: WidthResult) -> str:
    if got["verdict"] != want["verdict"]:
        detail = next((r for r in want["reasons"] if "token IDs differ" in r), want["reasons"][0] if want["reasons"] else "")
        return f"q={q} verdict recorded {got['verdict']}, recomputed {want['verdict']}" + (f": {detail}" if detail else "")
    fields = _differing_keys(got, want)
    cells = sorted(
        f"prompt {a['prompt_index']} {k}"
        for a, b in zip(got["prompts"], want["prompts"], strict=False)
        for k in _differing_keys(a, b)
    )
    return f"q={q}: recorded {', '.join(cells or fields)} differ from the recomputation"



def verdict_leaves(doc: Results) -> dict[str, Any]:
    """Every verdict a results document records, keyed as ``first_difference`` names paths."""
    return {
        "verdict": doc["verdict"], "target_only": {"verdict": doc["target_only"]["verdict"]},
        "widths": [{"q": w["q"], "verdict": w["verdict"],
                    "prompts": [{"prompt_index": p["prompt_index"], "verdict": p["verdict"]} for p in w["prompts"]]}
                   for w in doc["widths"]],
    }


def across_versions(recorded: Results, derived: Results, sealed_schema: int, sealed_by: str,
                    derived_by: str) -> tuple[list[str], list[str]]:
    """(problems, notes) for a bundle sealed with an older schema: its copied fields must agree with the sealed
    files (else: edited); its verdicts are re-derived with today's rules and compared, a difference being a note."""
    copied = [k for k in sorted(set(recorded) | set(derived)) if k not in convert.JUDGED]
    difference = first_difference({k: recorded.get(k) for k in copied}, {k: derived.get(k) for k in copied})
    problems = [f"results.json differs from what its sealed files derive: {difference}"] if difference else []
    head = (f"sealed by ds4ci {sealed_by} (schema {sealed_schema}); re-derived by ds4ci {derived_by} "
            f"(schema {convert.CURRENT})")
    verdicts = first_difference(verdict_leaves(recorded), verdict_leaves(derived))
    if verdicts is None:
        note = f"{head}: the verdicts agree"
    else:
        note = (f"{head}: the verdicts differ, first at {verdicts} (a finding of today's rules, not tampering; "
                "the exit code is the re-derived verdict's)")
    other = first_difference(recorded, derived)
    if verdicts is None and other is not None:
        note += f"; other judged fields differ, first at {other}"
    return problems, [note]
