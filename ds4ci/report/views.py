"""The templates' context: what a runner's section shows, taken from its :class:`~ds4ci.report.docview.DocView`.

Nothing here reads a results document; the formatting helpers double as the templates' filters
(:func:`ds4ci.report.render.environment`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.report import markdown
from ds4ci.report.docview import DocView, first_line
from ds4ci.report.docview.compare import Comparison
from ds4ci.report.docview.figures import WidthFigures
from ds4ci.report.glance import COVERAGE_DOC, docs_link
from ds4ci.report.markdown import Trusted
from ds4ci.report.sections import UNVERIFIED


@dataclass(frozen=True)
class Detail:
    """How much of a runner's results a section shows; levels drop the least important first."""

    log_tails: str  # "all", "failed" or "none"
    per_prompt: bool
    artifacts: bool
    lists: int  # how many reasons / checks / conflicts are listed before "and N more"
    stub: bool = False


def state_label(state: str) -> Trusted:
    icons = {
        "pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error", "not_run": "⏭️ not run", "pending": "⏳ pending",
        UNVERIFIED: "⚠️ unverified",
    }
    return Trusted(icons.get(state, "❔ unknown"))


def short(sha: object) -> Trusted:
    return markdown.code(str(sha)[:7]) if isinstance(sha, str) and sha else Trusted("—")


def size_bytes(value: object) -> str:
    return f"{value:,} B" if isinstance(value, int) else "—"


def tail_lines(value: str, lines: int = 40) -> str:
    return "\n".join(value.splitlines()[-lines:])


_QUOTING_ARM = re.compile(r"(target-only|reference-exact q=[0-9,]+)(?=:| crashed)")
_NOTHING_QUOTED = ("(empty logs)",)  # what evidence of earlier versions quoted for two empty logs


def quote_of(reason: str) -> tuple[str, list[str]]:
    """What a reason quotes below its first line (a server's log lines), labelled with the arm whose log it is,
    or with "its reason"; no lines when it quotes nothing, or only that the logs were empty."""
    lines = reason.strip().splitlines()
    arm = _QUOTING_ARM.search(lines[0]) if lines else None
    quoted = lines[1:] if tuple(lines[1:]) != _NOTHING_QUOTED else []
    return (f"Log of {arm.group(1)}, quoted with its reason" if arm else "Quoted with its reason"), quoted


def artifact_name(view: DocView) -> str:
    """The artifact the gate workflow uploads this runner's evidence as."""
    return f"ds4ci-evidence-{view.name}"


def artifact_url(run_url: str | None) -> str | None:
    return f"{run_url}#artifacts" if run_url else None


def runner_context(
    view: DocView, detail: Detail, run_url: str | None, predecessor: str | None, kind: str,
) -> dict[str, Any]:
    """What runner.md.j2 shows of one runner's :class:`DocView`."""
    verdict = view.verdict
    checks = list(view.checks)
    return {
        "kind": kind,
        "r": view.shown,
        "name": view.name,
        "role": view.role,
        "negative_control_for": view.negative_control_for,
        "verdict": verdict,
        "state_label": state_label(verdict),
        "detail": detail,
        "head": view.head,
        "predecessor": predecessor if verdict != "pass" else None,
        "gate_rows": list(view.gate_rows),
        "prompt_rows": list(view.prompt_rows),
        "multi_prompt": view.multi_prompt,
        "rollback_line": view.rollback,
        "parity_column": view.parity_column,
        "arm_evidence": list(view.arm_evidence),
        "failures": list(view.differences),
        "artifacts": list(view.artifacts),
        "checks": checks,
        "log_checks": [
            c
            for c in checks
            if c["log_tail"] and (detail.log_tails == "all" or (detail.log_tails == "failed" and c["status"] != "pass"))
        ],
        "run_url": run_url,
        "digest": view.digest,
        "containment": view.containment,
        "signing": view.signing,
        "tree": view.tree,  # "built from a modified tree"
        "headline": view.headline,
        # The comment shows a passing gate runner as one collapsed line; the job summary and the check run in full.
        "glance": kind == "comment" and verdict == "pass" and view.role == "gate" and not detail.stub,
        "reason_lines": [first_line(r) for r in view.reasons],
        "reason_more": [quote_of(r) for r in view.reasons],
        "rejected_drafts": view.rejected_drafts,
        "coverage_words": list(view.coverage),
        "coverage_doc": docs_link(*COVERAGE_DOC),
        "toolchain": list(view.toolchain),
        "host": list(view.host),
        "target_only": view.target_only,
        "check_words": list(view.check_words),
        "diagnostics": view.diagnostics,
        "server_logs": list(view.server_logs),
        "artifact": artifact_name(view),
        "artifact_url": artifact_url(run_url),
        "lifecycle_ok": view.lifecycle_ok,
    }


def revision_views(docs: Sequence[DocView]) -> list[dict[str, Any]]:
    """Distinct revision records across runners, each with the runners that share it."""
    from ds4ci.report.docview.words import head_label, merge_words

    views: list[dict[str, Any]] = []
    for doc in docs:
        if doc.revisions is None:
            continue
        shared = doc.revisions  # the predecessor is per runner (shown in its section), not part of it
        for view in views:
            if view["record"] == shared:
                view["runners"].append(doc.name)
                break
        else:
            views.append({"record": shared, "runners": [doc.name], "merge": merge_words(shared),
                          "ref": head_label(shared)})
    return views


def _accepted(figures: WidthFigures | None) -> str:
    if figures is None or figures.matched is None or figures.offered is None:
        return "—"
    share = f" ({figures.acceptance * 100:.0f}%)" if figures.acceptance is not None else ""
    return f"{figures.matched:,}/{figures.offered:,}{share}"


def duration(seconds: float | None) -> str:
    """Seconds in a reader's unit: ``45 s``, ``12 min``, ``1 h 05 min``."""
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def reproduce_lines(view: DocView) -> list[str]:
    """What a developer pastes on a runner of this name: the head, then the gate at the widths it ran."""
    qs = view.qs or view.widths_asked
    widths = f" --widths {','.join(map(str, qs))}" if qs else ""
    head = [f"git checkout {view.head}"] if view.head else []
    return [*head, f"ds4ci gate --config ds4ci.toml --runner {view.name}{widths}"]


def place_links(view: DocView, repo: str | None) -> list[Trusted]:
    """The failing build's and checks' first places in the pull request's files, linked at the head."""
    out = []
    for note in view.annotations[:5]:
        label = f"{note.path}:{note.line}"
        url = (f"https://github.com/{repo}/blob/{view.head}/{note.path}#L{note.line}"
               if repo and view.head else None)
        out.append(markdown.link(label, url) if url else markdown.code(label, 200))
    return out


def against_context(view: DocView, against: Comparison, run_url: str | None, repo: str | None) -> dict[str, Any]:
    """What the section says beside the base branch's result, and the links a reviewer follows."""
    from ds4ci.report import chart

    base = against.base
    vouched = base is not None and base.state is not None
    return {
        "change": against.change,
        "against_words": against.words,
        "base_sha": base.sha if base is not None else None,
        "base_detail": base.detail if base is not None else None,
        "base_vouched": vouched,
        "accept_rows": [{"q": r.q, "here": _accepted(r.here), "base": _accepted(r.base)} for r in against.rows],
        "gate_time": duration(against.gate_s),
        "base_gate_time": duration(against.base_gate_s) if vouched else None,
        "chart": chart.acceptance(against),
        "reproduce_lines": reproduce_lines(view),
        "places": place_links(view, repo),
        "job_url": run_url,
    }
