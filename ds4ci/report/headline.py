"""The pull request's result in one line, at the top of the comment, and each runner's line of the table.

"2 of 2 runners pass on abc1234: may merge", "blocked: gfx1151 fails parity at q=3, position 42 (new since the
base)", "gfx1151 could not reach a verdict (runner problem: …)". Made from the comment's sections (each runner's
state and its one-line ``why``), so a runner whose section was kept from an earlier publish counts as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from ds4ci.report import markdown
from ds4ci.report.docview import DocView
from ds4ci.report.docview.compare import NEW, PRE_EXISTING, Comparison
from ds4ci.report.docview.words import SERVER_CRASH
from ds4ci.report.markdown import Trusted
from ds4ci.report.sections import BISECT, UNVERIFIED, Section

_SHORT = {NEW: "new since the base", PRE_EXISTING: "already failing on the base"}
MAX_NAMED = 3  # runners named in the headline before "and N more"


def why(view: DocView, against: Comparison) -> str:
    """A runner's line in the table (and in the headline): what passed, what blocks, or why no verdict came."""
    if view.state == "success":
        return view.headline
    change = f" ({_SHORT[against.change]})" if against.change in _SHORT else ""
    if view.problem == SERVER_CRASH:  # the pull request's server: new or not, as a failure is
        return f"{view.problem}: {view.blocker}{change}"
    if view.problem is not None:  # the runner's problem says nothing about the pull request
        return f"{view.problem}: {view.blocker}"
    if view.verdict == "pass":
        return view.headline  # a pass the document contradicts: its status is an error, and says so
    return f"{view.blocker}{change}"


def _names(sections: Sequence[Section]) -> str:
    shown = [markdown.text(s.runner) for s in sections[:MAX_NAMED]]
    more = f" and {len(sections) - MAX_NAMED} more" if len(sections) > MAX_NAMED else ""
    return ", ".join(shown) + more


def _said(section: Section) -> str:
    return section.why or "see its section"  # escaped already (Section.why)


def _runner_says(section: Section) -> str:
    """``gfx1151 fails parity at …`` where the line is a verb phrase, else ``gfx1151: <the first reason>``."""
    said = _said(section)
    name = markdown.text(section.runner)
    return f"{name} {said}" if said.startswith(_VERBS) else f"{name}: {said}"


_VERBS = ("fails ", "does not build")


def of_sections(sections: Sequence[Section], heads: Sequence[str]) -> Trusted:
    """The comment's first line (escaped Markdown)."""
    return Trusted(_line(sections, heads))


def _line(sections: Sequence[Section], heads: Sequence[str]) -> str:
    runners = [s for s in sections if s.role != BISECT]
    gates = [s for s in runners if s.role == "gate"]
    on = f" on {heads[0][:7]}" if len(heads) == 1 else ""
    failing = [s for s in runners if s.state == "fail" or (s.state == "error" and _said(s).startswith(SERVER_CRASH))]
    if failing:
        first = failing[0]
        more = f"; {_names(failing[1:])} also" if len(failing) > 1 else ""
        return f"blocked: {_runner_says(first)}{more}"
    stuck = [s for s in runners if s.state in ("error", "not_run", UNVERIFIED)]
    if stuck:
        first = stuck[0]
        what = "has no verified result" if first.state == UNVERIFIED else "could not reach a verdict"
        more = f" (and {_names(stuck[1:])})" if len(stuck) > 1 else ""
        return f"{markdown.text(first.runner)} {what} ({_said(first)}){more}"
    passed = [s for s in gates if s.state == "pass"]
    waiting = [s for s in gates if s.state == "pending"]
    if waiting:
        return f"{len(passed)} of {len(gates)} runners pass{on}; waiting for {_names(waiting)}"
    if not gates:
        return f"{len(runners)} negative control(s) reported{on}; no gate runner has a result"
    return f"{len(passed)} of {len(gates)} runners pass{on}: may merge"
