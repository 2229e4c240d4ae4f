"""One view of a runner's document, computed once: the words its status, check run and comment section share.

:class:`DocView` holds what more than one published form says about a document: its head, its headline
(what passed, or the first reason it did not), what the server claimed about rollback versus what the gate
tested, the coverage words per width and the results digest. ``ds4ci.report.views`` builds a section's
template context from it; ``ds4ci.github.runnerview`` builds the status description and check run title
from the same one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ds4ci.judging.coverage import BOUNDARY_NAMES
from ds4ci.judging.oracle import ORACLE_TEXT
from ds4ci.records import Results
from ds4ci.report import markdown
from ds4ci.report.glance import coverage_words, grouped_reasons
from ds4ci.report.sections import head_sha, results_digest


@dataclass(frozen=True)
class DocView:
    """The shared words about one runner's document."""

    name: str
    role: str
    verdict: str
    head: str | None
    headline: str
    rollback: str  # what the server claimed about rollback versus what the gate tested
    coverage: tuple[str, ...]  # the coverage words of each width that has coverage
    digest: str  # identifies the document in the comment


def view_of(doc: Results) -> DocView:
    return DocView(name=doc["runner"]["name"], role=doc["runner"]["role"], verdict=doc["verdict"], head=head_sha(doc),
                   headline=headline(doc), rollback=rollback_words(doc),
                   coverage=tuple(coverage_words(w["coverage"]) for w in doc["widths"] if "coverage" in w),
                   digest=results_digest(doc))


REASON_CHARS = 160  # one line of the top table


def fmt_int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


def sum_or_none(values: Iterable[object]) -> int | None:
    total = 0
    for value in values:
        if not isinstance(value, int):
            return None
        total += value
    return total


def _at_widths(qs: Sequence[int]) -> str:
    return "q=" + ",".join(map(str, qs))


def rollback_words(doc: Results) -> str:
    """What the run says about rollback, split into what the server claimed and what the gate tested.

    The server's own lines claim it (the reference-exact banner, ``full_snap=1``); nothing the gate reads
    shows a restore happening. What the gate tests is token parity of complete answers in which the
    server's counters report rejected drafts, and, where per-step lines fix them, at which boundaries."""
    widths = [w for w in doc["widths"] if w["prompts"]]
    if not widths:
        return ""
    said = [w["q"] for w in widths if all(p["banner_claimed"] and p["full_snap_claimed"] for p in w["prompts"])]
    claim = (f"claimed by the server (its reference-exact banner and full_snap=1) at {_at_widths(said)}"
             if said else "not claimed by the server at any width")
    tested = []
    for w in widths:
        rejected = sum_or_none(p["rejected_drafts"] for p in w["prompts"])
        parity = all(p["parity_requests"] == p["requests"] > 0 for p in w["prompts"])
        cov = w.get("coverage")
        b = cov["boundaries"] if cov else None
        at = [f"a {name} (first at {', '.join(map(str, b[k]['first_rejected_positions']))})"
              if b[k]["first_rejected_positions"] else f"a {name}"
              for k, name in BOUNDARY_NAMES.items() if b and b[k]["rejected_at_boundary"]]
        where = f", with rejected drafts at {'; '.join(at)}" if at else ""
        held = "identical answers" if parity else "answers that differ"
        tested.append(f"q={w['q']}: {held} after {fmt_int(rejected)} rejected drafts{where}")
    return f"{claim}. What the gate tested: {'; '.join(tested)}."



def first_line(value: str) -> str:
    """A reason's first line (a reason may quote a log tail below it), whitespace collapsed."""
    lines = value.strip().splitlines()
    return " ".join(lines[0].split()) if lines else ""


def headline(doc: Results) -> str:
    """The runner's result in one line: what passed, or the first reason it did not."""
    if doc["verdict"] == "pass" and doc["runner"]["role"] == "negative-control":
        return f"{len(doc['checks'])} check(s) passed; no parity claim"
    if doc["verdict"] == "pass":
        widths = ",".join(str(w["q"]) for w in doc["widths"])
        oracle = doc["target_only"].get("oracle")
        if oracle == ORACLE_TEXT:
            return (f"text parity (the answers' text, not token IDs) at q={widths}, "
                    f"{doc['settings']['max_tokens']} tokens (oracle: {oracle})")
        return f"token parity at q={widths}, {doc['settings']['max_tokens']} tokens" + (f" (oracle: {oracle})" if oracle else "")
    reasons = grouped_reasons(doc["reasons"])
    if not reasons:
        return "no reason recorded"
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return markdown.cut_at_word(first_line(reasons[0]), REASON_CHARS - len(more)) + more
