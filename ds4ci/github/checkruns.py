"""One check run per runner (``ds4ci/<runner>``): where GitHub shows results, and what merge gating may read.

The check run is made from the same verified bundle and the same :class:`ds4ci.github.publish.StatusPlan`
as the runner's commit status, on the same head: its conclusion follows the status (success, failure;
neutral for a negative control, whose pass is no parity evidence; action_required for a focused rerun
that needs the full run; cancelled or timed_out where the run says it was interrupted or ran out of time),
its summary is the runner's comment section, its text the digests, the signature and the reproduce
command. GitHub's limits (65,535 characters for summary and for text, 50 annotations per request) are
met by dropping detail level by level, as the comment does, and by naming how many annotations were left.

Annotations point only at the pull request's own files: a ``path:line`` that a failing build or check
printed (GCC/Clang ``error:``, GoogleTest ``Failure``, a Python traceback's ``Error``), relative to the
checkout (the build's working directory, where the checks run by default) and never outside it.

Trust: a check run counts for merge gating only when its app is the publisher's (``app_of``: the
GitHub App whose bot account posts the statuses) and it is on the exact head, as statuses count only
from the publisher.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ds4ci.records import Results
from ds4ci.report import docview, glance, markdown, render
from ds4ci.report.sections import results_digest

NAME = "ds4ci/{runner}"
MAX_CHARS = 65_535  # output.summary and output.text
MAX_ANNOTATIONS = 50  # per request; ds4ci sends one request per check run
SUCCESSFUL = ("success",)  # what a required ds4ci check run must conclude; neutral is a control, not evidence
_INTERRUPTED = re.compile(r"\binterrupted by SIG(?:INT|TERM)\b")
_TIMED_OUT = re.compile(r"\bwithin [0-9.]+ s \(--(?:startup|request)-timeout\)|\bdid not finish within\b")
_LOCATION = re.compile(
    r"^(?P<path>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? ?"
    r"(?P<what>(?:fatal )?error\b|Failure\b|[A-Z][A-Za-z]*Error\b)(?P<rest>.*)$"
)


@dataclass(frozen=True)
class Annotation:
    path: str  # relative to the repository root
    line: int
    message: str
    title: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "start_line": self.line, "end_line": self.line, "annotation_level": "failure",
                "message": self.message, "title": self.title}


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


def conclusion(doc: Results, state: str) -> str:
    """The check run's conclusion for a runner whose status is ``state`` (the same decision, in Checks' words)."""
    if state == "success":
        return "neutral" if doc["runner"]["role"] == "negative-control" else "success"
    if state == "pending":  # a focused rerun's pass that the policy does not let turn green: the full run is due
        return "action_required"
    first = doc["reasons"][0] if doc["reasons"] else ""
    if doc["verdict"] == "error" and _INTERRUPTED.search(first):
        return "cancelled"
    if doc["verdict"] == "error" and _TIMED_OUT.search(first):
        return "timed_out"
    return "failure"


def _inside(path: str, root: str | None) -> str | None:
    """``path`` as a repository path: relative to ``root`` when absolute; None when it leaves the checkout."""
    if path.startswith("/"):
        if not root or not root.startswith("/"):
            return None
        rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(root))
    else:
        rel = posixpath.normpath(path)
    if rel in (".", "") or rel.startswith("../") or rel == ".." or rel.startswith("/"):
        return None
    return rel


def locations(log: str, root: str | None, source: str) -> list[Annotation]:
    """The ``path:line`` errors in one log tail that point inside the checkout, each place once."""
    out: list[Annotation] = []
    seen: set[tuple[str, int]] = set()
    for raw in log.splitlines():
        match = _LOCATION.match(markdown.clean(raw).strip())
        if match is None:
            continue
        path = _inside(match.group("path"), root)
        line = int(match.group("line"))
        if path is None or line < 1 or (path, line) in seen:
            continue
        seen.add((path, line))
        message = (match.group("what") + match.group("rest")).strip()
        out.append(Annotation(path, line, message[:1000], f"{source}: {match.group('what')}"[:255]))
    return out


def find_annotations(doc: Results) -> tuple[list[Annotation], int]:
    """(annotations to send, how many more were found) from the failing build and checks."""
    build = doc.get("build")
    root = build["cwd"] if build else None
    found: list[Annotation] = []
    if build and build["status"] != "pass":
        found += locations(build["log_tail"], root, "build")
    for check in doc["checks"]:
        if check["status"] != "pass":
            found += locations(check["log_tail"], root, check["name"])
    unique = list({(a.path, a.line): a for a in found}.values())
    return unique[:MAX_ANNOTATIONS], max(len(unique) - MAX_ANNOTATIONS, 0)


def _fit(text: str, more: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[: MAX_CHARS - len(more) - 1] + markdown.ELLIPSIS + more


def summary(doc: Results, env: Any, run_url: str | None, predecessor: str | None, left: int,
            seen: docview.DocView | None = None, calibration: str | None = None) -> str:
    """The runner's comment section, at the most detail that fits GitHub's limit."""
    note = f"\n\n{left} more error location(s) in the logs than the 50 annotations shown." if left else ""
    body = ""
    for detail in render.LEVELS:
        body = render.render_section(env, doc, detail, run_url=run_url, predecessor=predecessor, kind="check",
                                     seen=seen, calibration=calibration).body
        if len(body) + len(note) <= MAX_CHARS:
            return body + note
    return _fit(body + note, "")


def text(doc: Results, signature: str) -> str:
    """Digests, the runner's signature and the whole reproduce command."""
    evidence = doc["evidence"]["manifest_sha256"]
    lines = [
        f"**Evidence digest** (manifest.json): {markdown.code(evidence) if evidence else 'not recorded'}",
        f"**Results digest**: {markdown.code(results_digest(doc))}",
        f"**Runner signature**: {markdown.text(signature, 500)}",
        "",
        "**Reproduce**:",
        "",
    ]
    head = "\n".join(lines) + "\n"
    room = MAX_CHARS - len(head) - 20
    return head + markdown.code_block(doc["reproduce"], limit=room, info="sh")


_STATE_WORDS = {"success": "pass", "failure": "fail", "error": "error"}


def title(doc: Results, state: str, description: str, head: str, headline: str | None = None) -> str:
    """A title that is never cut: the decision, the head it judged, and (a pass) what passed or (else) how many
    causes the summary lists; the status description (at most 140 characters) says the first cause."""
    word = _STATE_WORDS.get(state, state)
    if doc["runner"]["role"] == "negative-control":
        word = f"negative control: {word}"
    if state == "success":
        return f"{word} on {head[:12]}: {headline if headline is not None else docview.headline(doc)}"
    causes = len(glance.grouped_reasons(doc["reasons"])) or 1
    if doc["verdict"] == "pass":  # a pass the document contradicts (the status says so)
        return f"{word} on {head[:12]}: {markdown.clean(description)}"
    return f"{word} on {head[:12]}: {causes} cause{'s' if causes != 1 else ''}, each in the summary"


def plan(doc: Results, state: str, description: str, head: str, *, env: Any, run_url: str | None,
         predecessor: str | None, signature: str, seen: docview.DocView | None = None,
         calibration: str | None = None) -> CheckRunPlan:
    """What one runner's check run says, from the document and status decision the commit status uses."""
    notes, left = find_annotations(doc)
    return CheckRunPlan(
        name=NAME.format(runner=doc["runner"]["name"]),
        head_sha=head,
        conclusion=conclusion(doc, state),
        title=title(doc, state, description, head, seen.headline if seen is not None else None),
        summary=summary(doc, env, run_url, predecessor, left, seen, calibration),
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
