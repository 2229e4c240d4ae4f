"""A finished (or stopped) search as the ``ds4ci bisect --json`` document, its exit code and its text.

Exit codes, in the one meaning every command shares: 0 the first failing commit was found (the answer to "find
the culprit" is yes); 1 no culprit in the range (the bad end passes, or the good end fails already); 3 no
verdict (only skipped commits left where the culprit is, an end that cannot be judged, a step the gate refused,
an interrupt). A bisect sets no status, so its 0 turns nothing green.
"""

from __future__ import annotations

from typing import Final

from ds4ci.bisect.search import Search, Verdict
from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS
from ds4ci.records import BisectCommit, BisectResult

EXIT_CODES: Final[dict[Verdict, int]] = {"found": EXIT_PASS, "not_found": EXIT_FAIL, "no_verdict": EXIT_ERROR}


def _commit(search: Search, position: int | None) -> BisectCommit | None:
    if position is None:
        return None
    found = search.commits[position]
    return {"sha": found["sha"], "subject": found["subject"]}


def document(search: Search, runner: str, expected_steps: int) -> BisectResult:
    first = search.step_at(search.first_bad)
    return {
        "schema": "ds4ci/bisect/v1",
        "runner": runner,
        "verdict": search.verdict,
        "exit_code": EXIT_CODES[search.verdict],
        "reason": search.reason[:4096],
        "good": search.commits[0],
        "bad": search.commits[-1],
        "commits": len(search.commits),
        "expected_steps": expected_steps,
        "first_failing": _commit(search, search.first_bad),
        "last_passing": _commit(search, search.last_good) if search.verdict == "found" else None,
        "differences": first["differences"] if first is not None else [],
        "skipped": [s for s in search.steps if s["outcome"] == "skip"],
        "candidates": [search.commits[i] for i in search.candidates],
        "steps": search.steps,
    }


def text(doc: BisectResult) -> str:
    """The result for a terminal: what was found, where it breaks, what was skipped, where the evidence is."""
    from ds4ci.report.bisect import where_it_breaks

    lines = [f"bisect: {doc['verdict'].replace('_', ' ')}: {doc['reason']}"]
    if doc["first_failing"] is not None and doc["last_passing"] is not None:
        lines.append(f"  first failing commit: {doc['first_failing']['sha']} {doc['first_failing']['subject']}")
        lines += [f"    {phrase}" for phrase in where_it_breaks(doc)]
        lines.append(f"  last passing commit:  {doc['last_passing']['sha']} {doc['last_passing']['subject']}")
    if doc["candidates"]:
        lines.append("  the first failing commit is one of:")
        lines += [f"    {c['sha']} {c['subject']}" for c in doc["candidates"]]
    for step in doc["skipped"]:
        lines.append(f"  skipped: {step['sha'][:12]} {step['subject'][:80]}: {step['reason'][:300]}")
    lines.append(f"  {len(doc['steps'])} gate runs (about {doc['expected_steps']} without skips); evidence:")
    lines += [f"    {s['sha'][:12]} {s['outcome']:<4} {s['evidence'] or '(none)'}" for s in doc["steps"]]
    return "\n".join(lines)
