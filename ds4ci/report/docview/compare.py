"""A runner's result beside the base branch's: a new failure, one the base already had, a fix; acceptance (drafts
accepted of offered) and gate time against the base's.

The base's result is what GitHub's records say about the base branch's commit on that runner, read the way
merge-check reads them (``ds4ci.github.baseline``): the publisher's status there, and whether a record of GitHub's
ties it to the trusted gate. Its numbers come from the figures line ds4ci writes into every check run's text
(:func:`figures_line`); a base result no record vouches for is shown as such and compares nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ds4ci.report.docview.build import DocView
from ds4ci.report.docview.figures import WidthFigures

FIGURES_VERSION = 1
_FIGURES = re.compile(r"^<!-- ds4ci:figures (\{[^<>\n]{2,8000}\}) -->$", re.MULTILINE)

NEW = "new"  # fails here, passed on the base
PRE_EXISTING = "pre-existing"  # fails here and on the base
FIXED = "fixed"  # passes here, failed on the base
STILL_PASSES = "still passes"
NO_BASE = "no base result"  # the base has no result on this runner that a record of GitHub's vouches for


@dataclass(frozen=True)
class BaseResult:
    """The base branch's latest result on one runner, as GitHub's records say it."""

    sha: str  # the base commit
    state: str | None  # success | failure | error, where a record vouches for it; None: no vouched result
    detail: str  # the record that vouched, or why none did
    widths: tuple[WidthFigures, ...] = ()  # its figures line, where its check run carried one
    gate_s: float | None = None
    first: str | None = None  # where it first differed ("q=3, position 42")


@dataclass(frozen=True)
class AcceptRow:
    q: int
    here: WidthFigures | None
    base: WidthFigures | None


@dataclass(frozen=True)
class Comparison:
    change: str  # NEW | PRE_EXISTING | FIXED | STILL_PASSES | NO_BASE
    base: BaseResult | None
    rows: tuple[AcceptRow, ...]
    gate_s: float
    base_gate_s: float | None

    first: str | None = None  # where this head's answers first differed

    @property
    def words(self) -> str:
        """The change in a reviewer's words, naming the base commit."""
        sha = self.base.sha[:7] if self.base is not None else ""
        if self.change == PRE_EXISTING and self.base is not None and self.first and self.base.first == self.first:
            return f"already failing on the base ({sha}), at the same position"
        return {NEW: f"new since the base ({sha} passed)", PRE_EXISTING: f"already failing on the base ({sha})",
                FIXED: f"fixed: the base ({sha}) fails", STILL_PASSES: f"passes on the base ({sha}) too",
                }.get(self.change, f"no vouched result on the base{f' ({sha})' if sha else ''}")


def figures_line(view: DocView) -> str:
    """The hidden line a check run's text carries, so that a later pull request can set its numbers beside these."""
    record = {"v": FIGURES_VERSION, "state": view.state, "gate_s": round(view.gate_s, 1), "first": view.first_place,
              "widths": [f.to_json() for f in view.figures]}
    return f"<!-- ds4ci:figures {json.dumps(record, separators=(',', ':'), sort_keys=True)} -->"


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else None


def _seconds(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e7
    return float(value) if ok else None  # type: ignore[arg-type]


def parse_figures(text: str) -> tuple[tuple[WidthFigures, ...], float | None, str | None] | None:
    """(widths, gate seconds, first difference) of a check run's figures line; None where there is none, or it is
    not exactly one well-formed line (the numbers only label the base; nothing is judged from them)."""
    found = _FIGURES.findall(text or "")
    if len(found) != 1:
        return None
    try:
        record: Any = json.loads(found[0])
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != FIGURES_VERSION or not isinstance(record.get("widths"), list):
        return None
    widths = []
    for item in record["widths"][:16]:
        if not isinstance(item, dict) or _count(item.get("q")) is None or not isinstance(item.get("verdict"), str):
            return None
        widths.append(WidthFigures(int(item["q"]), str(item["verdict"])[:16], _count(item.get("matched")),
                                   _count(item.get("offered")), _seconds(item.get("run_s"))))
    first = record.get("first")
    return tuple(widths), _seconds(record.get("gate_s")), first[:80] if isinstance(first, str) else None


def compare(view: DocView, base: BaseResult | None) -> Comparison:
    """``view`` beside the base's result on its runner."""
    vouched = base is not None and base.state is not None
    here_ok, base_ok = view.passed, vouched and base is not None and base.state == "success"
    change = NO_BASE if not vouched else (
        STILL_PASSES if here_ok and base_ok else FIXED if here_ok else NEW if base_ok else PRE_EXISTING)
    theirs = {f.q: f for f in base.widths} if vouched and base is not None else {}
    qs = sorted({*(f.q for f in view.figures), *theirs})
    ours = {f.q: f for f in view.figures}
    return Comparison(change, base, tuple(AcceptRow(q, ours.get(q), theirs.get(q)) for q in qs), view.gate_s,
                      base.gate_s if vouched and base is not None else None, view.first_place)
