"""Render results.json documents as the sticky PR comment or the fuller job summary.

Each runner's part is rendered on its own into a :class:`ds4ci.report.sections.Section`; the
comment is then composed from sections (ours, plus those kept from the existing comment) and
shortened level by level until it fits GitHub's limit.

Every value from a results file is untrusted; templates run with Jinja2's finalize hook set
to :func:`ds4ci.report.markdown.finalize`, so nothing reaches the output unescaped unless it was
produced by our own escaping filters (:class:`ds4ci.report.markdown.Trusted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.errors import UsageError
from ds4ci.report import docview, headline, markdown, views
from ds4ci.report.docview import DocView
from ds4ci.report.docview.build import Viewable, as_views
from ds4ci.report.docview.compare import BaseResult, compare
from ds4ci.report.docview.figures import claimed
from ds4ci.report.docview.words import yes_no
from ds4ci.report.sections import BISECT, MARKER, Section, merge_sections
from ds4ci.report.views import Detail, state_label

COMMENT_LIMIT_BYTES = 60_000  # GitHub allows 65,536 characters; keep a margin
SUMMARY_LIMIT_BYTES = 1_000_000  # $GITHUB_STEP_SUMMARY takes up to 1 MiB per step

# Shortening order (least important first): log tails, per-prompt detail, artifacts, then
# long lists; the last level keeps only the verdict line and where the full report is.
LEVELS = (
    Detail(log_tails="all", per_prompt=True, artifacts=True, lists=200),
    Detail(log_tails="failed", per_prompt=True, artifacts=True, lists=20),
    Detail(log_tails="none", per_prompt=True, artifacts=True, lists=20),
    Detail(log_tails="none", per_prompt=False, artifacts=True, lists=10),
    Detail(log_tails="none", per_prompt=False, artifacts=False, lists=5),
    Detail(log_tails="none", per_prompt=False, artifacts=False, lists=0, stub=True),
)


# ---------------------------------------------------------------------------------------------
# Templates


def _bundled_template_dir() -> Path:
    """Templates shipped in the wheel (ds4ci/templates), else the repository's templates/ folder."""
    packaged = resources.files("ds4ci").joinpath("templates")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "templates"


def environment(template_dir: Path | None = None) -> Any:
    """A Jinja2 environment for Markdown: autoescape off, every value escaped by finalize."""
    import jinja2

    if template_dir is not None and not template_dir.is_dir():
        raise UsageError(f"--template-dir {template_dir}: expected a directory of Jinja2 templates, found none")
    loaders: list[jinja2.BaseLoader] = []
    if template_dir is not None:
        loaders.append(jinja2.FileSystemLoader(str(template_dir)))
    loaders.append(jinja2.FileSystemLoader(str(_bundled_template_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=False,  # noqa: S701 - Markdown, not HTML: finalize and the filters below escape
        finalize=markdown.finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(
        {
            "esc": markdown.text,
            "code": markdown.code,
            "codeblock": markdown.code_block,
            "link": markdown.link,
            "short": views.short,
            "bytes": views.size_bytes,
            "num": docview.fmt_int,
            "yesno": yes_no,
            "claimed": claimed,
            "state": state_label,
            "tail": views.tail_lines,
        }
    )
    return env


def render_template(env: Any, name: str, context: Mapping[str, Any]) -> str:
    import jinja2

    try:
        rendered: str = env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        raise UsageError(f"template {name}: {exc}") from exc
    return rendered.strip("\n")


def render_section(
    env: Any,
    view: DocView,
    detail: Detail,
    *,
    run_url: str | None = None,
    predecessor: str | None = None,
    kind: str = "comment",
    calibration: str | None = None,
    base: BaseResult | None = None,
    repo: str | None = None,
) -> Section:
    """``calibration``: how strong the proof is on this runner (``ds4ci.calibrate.latest.cite``), shown when given;
    ``base``: the base branch's result on this runner, where GitHub's records were read."""
    against = compare(view, base)
    context = {**views.runner_context(view, detail, run_url, predecessor, kind), "calibration": calibration,
               **views.against_context(view, against, run_url, repo)}
    body = render_template(env, "runner.md.j2", context)
    return Section(
        runner=view.name,
        role=view.role,
        state=view.verdict,
        head=view.head,
        digest=view.digest,
        body=body,
        why=markdown.text(headline.why(view, against), limit=docview.REASON_CHARS + 60),
    )


def pending_section(env: Any, runner: str, sha: str, run_url: str | None = None) -> Section:
    """A placeholder for a runner whose gate has started but not finished."""
    body = render_template(env, "pending.md.j2", {"name": runner, "head": sha, "run_url": run_url,
                                          "state_label": state_label("pending")})
    return Section(runner=runner, role="gate", state="pending", head=sha, digest=None, body=body,
                   why=markdown.text("the gate is running"))


def needs_hardware_section(
    env: Any, runner: str, head: str, widths: Sequence[int], predecessor: str | None,
    commits: Sequence[str] = (), files: Sequence[str] = (),
) -> Section:
    """A runner with no result on this head: what it last validated, what changed since, what is required."""
    body = render_template(env, "needs_hardware.md.j2", {
        "name": runner, "head": head, "widths": ",".join(map(str, widths)), "predecessor": predecessor,
        "commits": list(commits), "files": list(files), "state_label": state_label("pending"),
    })
    return Section(runner=runner, role="gate", state="pending", head=head, digest=None, body=body,
                   why=markdown.text(f"still needs a q={','.join(map(str, widths))} run on this head"))


def _stub(section: Section, run_url: str | None) -> Section:
    body = (
        f"### {state_label(section.state)}: {markdown.code(section.runner)}\n\n"
        f"Details left out to fit GitHub's comment limit: see the job summary of "
        f"{markdown.link('the workflow run', run_url)} and the evidence artifact."
    )
    return replace(section, body=body)


def compose(
    env: Any,
    sections: Sequence[Section],
    docs: Sequence[DocView],
    *,
    kind: str = "comment",
    run_url: str | None = None,
    shortened: bool = False,
    merge_status: Sequence[str] = (),
) -> str:
    """The whole body: marker first (outside any template, so an override cannot drop it).

    ``merge_status`` is the "Review and merge status" checklist (``merge.checklist_markdown``:
    already escaped Markdown lines).
    """
    current_heads = _heads(docs)
    rows = [
        {
            "runner": s.runner,
            "role": s.role,
            "state_label": state_label(s.state),
            "why": s.why,
            "head": s.head,
            "outdated": bool(current_heads) and s.head is not None and s.head not in current_heads,
        }
        for s in sections
        if s.role != BISECT
    ]
    context = {
        "kind": kind,
        "headline": headline.of_sections(sections, sorted(current_heads)),
        "rows": rows,
        "gate_sections": [s.text() for s in sections if s.role == "gate"],
        "control_sections": [s.text() for s in sections if s.role == "negative-control"],
        "control_names": [s.runner for s in sections if s.role == "negative-control"],
        "bisect_sections": [s.text() for s in sections if s.role == BISECT],
        "revision_views": views.revision_views(docs),
        "run_url": run_url,
        "version": __version__,
        "shortened": shortened,
        "merge_status": markdown.Trusted("\n".join(merge_status)),
    }
    template = "summary.md.j2" if kind == "summary" else "comment.md.j2"
    body = render_template(env, template, context)
    return f"{MARKER}\n{body}\n" if kind == "comment" else f"{body}\n"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _current(existing: Sequence[Section], docs: Sequence[DocView]) -> list[Section]:
    """The existing comment's sections to keep: all but a bisect that searched up to another head than ``docs``'
    (its culprit is of a history the pull request no longer has)."""
    heads = _heads(docs)
    return [s for s in existing if s.role != BISECT or not heads or s.head in heads]


def _heads(docs: Sequence[DocView]) -> set[str]:
    """The heads ``docs`` were made for (a document without one adds none)."""
    return {d.head for d in docs if d.head}


def render(
    items: Sequence[Viewable],
    *,
    kind: str = "comment",
    run_url: str | None = None,
    template_dir: Path | None = None,
    predecessors: Mapping[str, str] | None = None,
    existing: Sequence[Section] = (),
    extra: Sequence[Section] = (),
    limit: int | None = None,
    merge_status: Sequence[str] = (),
    calibrations: Mapping[str, str] | None = None,
    bases: Mapping[str, BaseResult] | None = None,
    repo: str | None = None,
) -> tuple[str, list[Section]]:
    """Render ``docs`` (plus sections kept from an existing comment) within the size limit.

    Returns the body and the sections it contains. ``extra`` are pre-rendered sections of our
    own (e.g. a pending placeholder) that replace same-runner ones from ``existing``.
    Levels of detail are dropped uniformly until the body fits; sections kept from an
    existing comment are reduced to stubs only at the last level. ``items``: each runner's :class:`DocView` (a
    validated document is viewed first); ``bases``: runner -> the base branch's result there (``ds4ci.github.baseline``).
    """
    docs = as_views(items)
    if kind not in ("comment", "summary"):
        raise UsageError(f"--format {kind!r}: expected 'comment' or 'summary'")
    if limit is None:
        limit = COMMENT_LIMIT_BYTES if kind == "comment" else SUMMARY_LIMIT_BYTES
    env = environment(template_dir)
    predecessors = predecessors or {}
    start = 0 if kind == "summary" else 1
    body = ""
    sections: list[Section] = []
    for index, detail in enumerate(LEVELS[start:], start=start):
        own = [
            render_section(
                env,
                doc,
                detail,
                run_url=run_url,
                predecessor=predecessors.get(doc.name) or doc.predecessor,
                kind=kind,
                calibration=(calibrations or {}).get(doc.name),
                base=(bases or {}).get(doc.name),
                repo=repo,
            )
            for doc in docs
        ]
        kept = _current(existing, docs)
        if detail.stub:
            kept = [_stub(s, run_url) for s in kept]
        sections = merge_sections([*own, *extra], kept)
        body = compose(env, sections, docs, kind=kind, run_url=run_url, shortened=index > start,
                       merge_status=merge_status)
        if _size(body) <= limit:
            return body, sections
    raise UsageError(
        f"the rendered {kind} is {_size(body)} bytes even with every detail left out; the limit is {limit}. "
        "Publish fewer runners per comment."
    )
