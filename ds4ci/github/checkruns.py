"""One check run per runner (``ds4ci/<runner>``): where GitHub shows results, and what merge gating may read.

The check run is made from the same verified bundle and the same :class:`ds4ci.github.publish.StatusPlan`
as the runner's commit status, on the same head: its conclusion follows the status (success, failure;
neutral for a negative control, whose pass is no parity evidence; action_required for a focused rerun
that needs the full run; cancelled or timed_out where the run says it was interrupted or ran out of time),
its summary is the runner's comment section, its text the digests, the signature and the reproduce
command. GitHub's limits (65,535 characters for summary and for text, 50 annotations per request) are
met by dropping detail level by level, as the comment does, and by naming how many annotations were left.

Annotations point only at the pull request's own files (``ds4ci.report.docview.places``: a ``path:line``
that a failing build or check printed, inside the checkout).

Trust: a check run counts for merge gating only when its app is the publisher's (``app_of``: the
GitHub App whose bot account posts the statuses) and it is on the exact head, as statuses count only
from the publisher.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ds4ci.report import markdown, render
from ds4ci.report.docview import DocView
from ds4ci.report.docview.compare import BaseResult, figures_line
from ds4ci.report.docview.places import MAX_ANNOTATIONS, Annotation, locations

__all__ = ["MAX_ANNOTATIONS", "Annotation", "CheckRunPlan", "locations"]

NAME = "ds4ci/{runner}"
MAX_CHARS = 65_535  # output.summary and output.text
SUCCESSFUL = ("success",)  # what a required ds4ci check run must conclude; neutral is a control, not evidence
_INTERRUPTED = re.compile(r"\binterrupted by SIG(?:INT|TERM)\b")
_TIMED_OUT = re.compile(r"\bwithin [0-9.]+ s \(--(?:startup|request)-timeout\)|\bdid not finish within\b")


@dataclass(frozen=True)
class CheckRunPlan:
    name: str
    head_sha: str
    conclusion: str
    title: str
    summary: str
    text: str
    details_url: str | None
    annotations: tuple[Annotation, ...] = ()

    def output(self) -> dict[str, Any]:
        out: dict[str, Any] = {"title": self.title, "summary": self.summary, "text": self.text}
        if self.annotations:
            out["annotations"] = [a.to_json() for a in self.annotations]
        return out


def app_of(login: str | None) -> str | None:
    """The app (``app.slug``) whose bot account is ``login`` (``github-actions[bot]`` -> ``github-actions``).

    A person's account has no app: it cannot create check runs, and none counts as its own.
    """
    if login and login.endswith("[bot]") and len(login) > 5:
        return login[: -len("[bot]")]
    return None


def conclusion(doc: DocView, state: str) -> str:
    """The check run's conclusion for a runner whose status is ``state`` (the same decision, in Checks' words)."""
    if state == "success":
        return "neutral" if doc.role == "negative-control" else "success"
    if state == "pending":  # a focused rerun's pass that the policy does not let turn green: the full run is due
        return "action_required"
    first = doc.first_reason
    if doc.verdict == "error" and _INTERRUPTED.search(first):
        return "cancelled"
    if doc.verdict == "error" and _TIMED_OUT.search(first):
        return "timed_out"
    return "failure"


def find_annotations(view: DocView) -> tuple[list[Annotation], int]:
    """(annotations to send, how many more were found) from the failing build and checks."""
    return list(view.annotations), view.annotations_left


def _fit(text: str, more: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[: MAX_CHARS - len(more) - 1] + markdown.ELLIPSIS + more


def summary(doc: DocView, env: Any, run_url: str | None, predecessor: str | None, left: int,
            calibration: str | None = None, base: BaseResult | None = None, repo: str | None = None) -> str:
    """The runner's comment section, at the most detail that fits GitHub's limit."""
    note = f"\n\n{left} more error location(s) in the logs than the 50 annotations shown." if left else ""
    body = ""
    for detail in render.LEVELS:
        body = render.render_section(env, doc, detail, run_url=run_url, predecessor=predecessor, kind="check",
                                     calibration=calibration, base=base, repo=repo).body
        if len(body) + len(note) <= MAX_CHARS:
            return body + note
    return _fit(body + note, "")


def text(doc: DocView, signature: str) -> str:
    """Digests, the runner's signature and the whole reproduce command; last, the hidden figures line a later pull
    request compares its numbers with (``docview.compare``)."""
    evidence = doc.manifest
    lines = [
        f"**Evidence digest** (manifest.json): {markdown.code(evidence) if evidence else 'not recorded'}",
        f"**Results digest**: {markdown.code(doc.digest)}",
        f"**Runner signature**: {markdown.text(signature, 500)}",
        "",
        "**Reproduce**:",
        "",
    ]
    head = "\n".join(lines) + "\n"
    figures = figures_line(doc)
    room = MAX_CHARS - len(head) - len(figures) - 20
    return head + markdown.code_block(doc.reproduce, limit=room, info="sh") + "\n\n" + figures


_STATE_WORDS = {"success": "pass", "failure": "fail", "error": "error"}


def title(doc: DocView, state: str, description: str, head: str) -> str:
    """A title that is never cut: the decision, the head it judged, and (a pass) what passed or (else) how many
    causes the summary lists; the status description (at most 140 characters) says the first cause."""
    word = _STATE_WORDS.get(state, state)
    if doc.role == "negative-control":
        word = f"negative control: {word}"
    if state == "success":
        return f"{word} on {head[:12]}: {doc.headline}"
    causes = len(doc.reasons) or 1
    if doc.verdict == "pass":  # a pass the document contradicts (the status says so)
        return f"{word} on {head[:12]}: {markdown.clean(description)}"
    return f"{word} on {head[:12]}: {causes} cause{'s' if causes != 1 else ''}, each in the summary"


def plan(doc: DocView, state: str, description: str, head: str, *, env: Any, run_url: str | None,
         predecessor: str | None, signature: str, calibration: str | None = None, base: BaseResult | None = None,
         repo: str | None = None) -> CheckRunPlan:
    """What one runner's check run says, from the view and status decision the commit status uses."""
    notes, left = find_annotations(doc)
    return CheckRunPlan(
        name=NAME.format(runner=doc.name),
        head_sha=head,
        conclusion=conclusion(doc, state),
        title=title(doc, state, description, head),
        summary=summary(doc, env, run_url, predecessor, left, calibration, base, repo),
        text=text(doc, signature),
        details_url=run_url,
        annotations=tuple(notes),
    )


def own_run(runs: Iterable[Any], name: str, head: str, app: str | None) -> Any | None:
    """The newest check run ``name`` on ``head`` made by ``app`` (runs as ``merge.CheckRun``), else None."""
    if app is None:
        return None
    mine = [r for r in runs if r.name == name and r.head_sha == head and r.app == app]
    return max(mine, key=lambda r: r.id) if mine else None
