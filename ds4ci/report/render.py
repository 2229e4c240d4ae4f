"""Render results.json documents as the sticky PR comment or the fuller job summary.

Rendering is two-level so that runners finishing at different times can share one comment:
each runner's part is rendered on its own into a :class:`Section` and wrapped in HTML-comment
markers that carry its identity (runner, role, state, head, results digest); the comment is
then composed from sections. A publisher for one runner parses the sections of the existing
comment (:func:`parse_sections`), replaces its own and keeps the others (:func:`merge_sections`).

Every value from a results file is untrusted; templates run with Jinja2's finalize hook set
to :func:`ds4ci.report.markdown.finalize`, so nothing reaches the output unescaped unless it was
produced by our own escaping filters (:class:`ds4ci.report.markdown.Trusted`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.errors import UsageError
from ds4ci.evidence.results import Results
from ds4ci.report import markdown
from ds4ci.report.markdown import Trusted

MARKER = "<!-- ds4ci:sticky-comment -->"
COMMENT_LIMIT_BYTES = 60_000  # GitHub allows 65,536 characters; keep a margin
SUMMARY_LIMIT_BYTES = 1_000_000  # $GITHUB_STEP_SUMMARY takes up to 1 MiB per step
MAX_RUNNERS = 32
STATES = ("pass", "fail", "error", "not_run", "pending", "unverified")
UNVERIFIED = "unverified"  # a result no bundle backs (e.g. a fork's artifact): shown, never as a pass

_RUNNER_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
_SECTION_RE = re.compile(
    r"^<!-- ds4ci:section v=1 runner=(?P<runner>" + _RUNNER_RE + r") role=(?P<role>gate|negative-control)"
    r" state=(?P<state>pass|fail|error|not_run|pending|unverified) head=(?P<head>[0-9a-f]{40}|none)"
    r" digest=(?P<digest>[0-9a-f]{64}|none) -->\n(?P<body>.*?)\n<!-- ds4ci:section-end runner=(?P=runner) -->$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Detail:
    """How much of a runner's results a section shows; levels drop the least important first."""

    log_tails: str  # "all", "failed" or "none"
    per_prompt: bool
    artifacts: bool
    lists: int  # how many reasons / checks / conflicts are listed before "and N more"
    stub: bool = False


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


@dataclass(frozen=True)
class Section:
    """One runner's rendered part of the comment plus the identity carried in its marker."""

    runner: str
    role: str
    state: str
    head: str | None
    digest: str | None
    body: str

    def text(self) -> Trusted:
        meta = (
            f"<!-- ds4ci:section v=1 runner={self.runner} role={self.role} state={self.state} "
            f"head={self.head or 'none'} digest={self.digest or 'none'} -->"
        )
        return Trusted(f"{meta}\n{self.body}\n<!-- ds4ci:section-end runner={self.runner} -->")


# ---------------------------------------------------------------------------------------------
# Loading and small helpers


def results_digest(doc: Results) -> str:
    """SHA-256 of the canonical JSON of a results document (identifies it in the comment)."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def check_inputs(paths: Sequence[Path]) -> None:
    """One input per runner, at least one, at most as many as fit one comment."""
    if not paths:
        raise UsageError("no results given: pass one results.json or evidence bundle per runner")
    if len(paths) > MAX_RUNNERS:
        raise UsageError(f"{len(paths)} results given; at most {MAX_RUNNERS} runners fit one comment")


def unique_runners(docs: list[Results]) -> list[Results]:
    """The documents, refused when two name the same runner."""
    seen: set[str] = set()
    for doc in docs:
        name = doc["runner"]["name"]
        if name in seen:
            raise UsageError(f"runner {name!r} appears twice: expected one result per runner")
        seen.add(name)
    return docs


def load_all(paths: Sequence[Path]) -> list[Results]:
    """Strictly load every results file; runner names must be unique across them."""
    from ds4ci.evidence.results import load

    check_inputs(paths)
    return unique_runners([load(p) for p in paths])


def head_sha(doc: Results) -> str | None:
    revisions = doc.get("revisions")
    if not isinstance(revisions, dict):
        return None
    head = revisions.get("head")
    sha = head.get("sha") if isinstance(head, dict) else None
    return sha if isinstance(sha, str) else None


def _fmt_int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


def _yes_no(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return "—"


def _state_label(state: str) -> Trusted:
    icons = {
        "pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error", "not_run": "⏭️ not run", "pending": "⏳ pending",
        UNVERIFIED: "⚠️ unverified",
    }
    return Trusted(icons.get(state, "❔ unknown"))


def _short(sha: object) -> Trusted:
    return markdown.code(str(sha)[:7]) if isinstance(sha, str) and sha else Trusted("—")


def _bytes(value: object) -> str:
    return f"{value:,} B" if isinstance(value, int) else "—"


# ---------------------------------------------------------------------------------------------
# View models: the numbers the templates show, computed once here rather than in Jinja.


def _sum_or_none(values: Iterable[object]) -> int | None:
    total = 0
    for value in values:
        if not isinstance(value, int):
            return None
        total += value
    return total


def _gate_rows(doc: Results) -> list[dict[str, Any]]:
    rows = []
    for width in doc["widths"]:
        prompts = width["prompts"]
        snaps = [p["full_snap"] for p in prompts]
        unknown = not prompts or any(s is None for s in snaps)
        full_snap = "—" if unknown else ("1" if all(snaps) else "0")
        matched = _sum_or_none(p["matched"] for p in prompts) if prompts else None
        offered = _sum_or_none(p["offered"] for p in prompts) if prompts else None
        rows.append(
            {
                "q": width["q"],
                "verdict": width["verdict"],
                "parity": f"{sum(p['parity_requests'] for p in prompts)}/{sum(p['requests'] for p in prompts)}",
                "steps": _fmt_int(_sum_or_none(p["steps"] for p in prompts) if prompts else None),
                "matched_offered": f"{_fmt_int(matched)}/{_fmt_int(offered)}",
                "rejection": _yes_no(all(p["rejection_observed"] for p in prompts) if prompts else None),
                "full_snap": full_snap,
                "tokens": "/".join(
                    [_fmt_int(_sum_or_none(p["tokens_target"] for p in prompts) if prompts else None),
                     _fmt_int(_sum_or_none(p["tokens_spec"] for p in prompts) if prompts else None)]
                ),
                "repeats_identical": all(p["repeats_identical"] for p in prompts) if prompts else None,
                "counters_identical": all(p["counters_identical"] for p in prompts) if prompts else None,
            }
        )
    return rows


def _mismatch_block(mismatch: Mapping[str, Any]) -> Trusted:
    """The IDs around the first differing position, aligned, with the position marked."""
    start = mismatch["window_start"]
    position = mismatch["position"]
    target = mismatch["target_ids"]
    spec = mismatch["spec_ids"]
    width = max([len(str(x)) for x in [*target, *spec, start + max(len(target), len(spec))]] + [1]) + 2

    def line(label: str, ids: Sequence[int]) -> str:
        cells = []
        for offset, token in enumerate(ids):
            cell = f"[{token}]" if start + offset == position else str(token)
            cells.append(cell.rjust(width))
        return f"{label:<16}" + "".join(cells)

    count = max(len(target), len(spec))
    header = f"{'position':<16}" + "".join(str(start + i).rjust(width) for i in range(count))
    body = "\n".join([header, line("target-only", target), line("reference-exact", spec)])
    return markdown.code_block(body, limit=None)


def _failures(doc: Results) -> list[dict[str, Any]]:
    out = []
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            if prompt["mismatch"] is not None:
                mm = prompt["mismatch"]
                out.append(
                    {
                        "q": width["q"],
                        "prompt_index": prompt["prompt_index"],
                        "position": mm["position"],
                        "target_len": mm["target_len"],
                        "spec_len": mm["spec_len"],
                        "block": _mismatch_block(mm),
                        "server_log": width["server_log"],
                    }
                )
    return out


def _artifacts(doc: Results) -> list[dict[str, Any]]:
    ids = doc["identities"]
    entries = [ids["server_bin"], ids["target"], ids["draft"], *ids["prompts"]]
    return [e for e in entries if e is not None]


def _tail_lines(value: str, lines: int = 40) -> str:
    return "\n".join(value.splitlines()[-lines:])


def _runner_context(
    doc: Results, detail: Detail, run_url: str | None, predecessor: str | None, kind: str
) -> dict[str, Any]:
    verdict = doc["verdict"]
    head = head_sha(doc)
    checks = doc["checks"]
    return {
        "kind": kind,
        "r": doc,
        "name": doc["runner"]["name"],
        "role": doc["runner"]["role"],
        "negative_control_for": doc["runner"].get("negative_control_for"),
        "verdict": verdict,
        "state_label": _state_label(verdict),
        "detail": detail,
        "head": head,
        "predecessor": predecessor if verdict != "pass" else None,
        "gate_rows": _gate_rows(doc),
        "failures": _failures(doc),
        "artifacts": _artifacts(doc),
        "checks": checks,
        "log_checks": [
            c
            for c in checks
            if c["log_tail"] and (detail.log_tails == "all" or (detail.log_tails == "failed" and c["status"] != "pass"))
        ],
        "run_url": run_url,
        "digest": results_digest(doc),
    }


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
            "short": _short,
            "bytes": _bytes,
            "num": _fmt_int,
            "yesno": _yes_no,
            "state": _state_label,
            "tail": _tail_lines,
        }
    )
    return env


def _render(env: Any, name: str, context: Mapping[str, Any]) -> str:
    import jinja2

    try:
        rendered: str = env.get_template(name).render(**context)
    except jinja2.TemplateError as exc:
        raise UsageError(f"template {name}: {exc}") from exc
    return rendered.strip("\n")


def render_section(
    env: Any,
    doc: Results,
    detail: Detail,
    *,
    run_url: str | None = None,
    predecessor: str | None = None,
    kind: str = "comment",
) -> Section:
    context = _runner_context(doc, detail, run_url, predecessor, kind)
    body = _render(env, "runner.md.j2", context)
    return Section(
        runner=doc["runner"]["name"],
        role=doc["runner"]["role"],
        state=doc["verdict"],
        head=context["head"],
        digest=context["digest"],
        body=body,
    )


def pending_section(env: Any, runner: str, sha: str, run_url: str | None = None) -> Section:
    """A placeholder for a runner whose gate has started but not finished."""
    body = _render(env, "pending.md.j2", {"name": runner, "head": sha, "run_url": run_url,
                                          "state_label": _state_label("pending")})
    return Section(runner=runner, role="gate", state="pending", head=sha, digest=None, body=body)


def needs_hardware_section(
    env: Any, runner: str, head: str, widths: Sequence[int], predecessor: str | None,
    commits: Sequence[str] = (), files: Sequence[str] = (),
) -> Section:
    """A runner with no result on this head: what it last validated, what changed since, what is required."""
    body = _render(env, "needs_hardware.md.j2", {
        "name": runner, "head": head, "widths": ",".join(map(str, widths)), "predecessor": predecessor,
        "commits": list(commits), "files": list(files), "state_label": _state_label("pending"),
    })
    return Section(runner=runner, role="gate", state="pending", head=head, digest=None, body=body)


def _stub(section: Section, run_url: str | None) -> Section:
    body = (
        f"### {_state_label(section.state)}: {markdown.code(section.runner)}\n\n"
        f"Details left out to fit GitHub's comment limit: see the job summary of "
        f"{markdown.link('the workflow run', run_url)} and the evidence artifact."
    )
    return replace(section, body=body)


def parse_sections(body: str) -> list[Section]:
    """The runner sections embedded in one of our comments (malformed ones are ignored)."""
    if not body.startswith(MARKER):
        return []
    sections = []
    for match in _SECTION_RE.finditer(body):
        head = match.group("head")
        digest = match.group("digest")
        sections.append(
            Section(
                runner=match.group("runner"),
                role=match.group("role"),
                state=match.group("state"),
                head=None if head == "none" else head,
                digest=None if digest == "none" else digest,
                body=match.group("body"),
            )
        )
    return sections


def merge_sections(ours: Sequence[Section], existing: Iterable[Section]) -> list[Section]:
    """Our sections replace same-runner ones; every other runner's section is kept (first wins).

    An unverified section never replaces one that a verified run wrote for the same runner.
    """
    existing = list(existing)
    trusted = {s.runner for s in existing if s.state != UNVERIFIED}
    merged: dict[str, Section] = {s.runner: s for s in ours if not (s.state == UNVERIFIED and s.runner in trusted)}
    for section in existing:
        merged.setdefault(section.runner, section)
    return order_sections(merged.values())


def order_sections(sections: Iterable[Section]) -> list[Section]:
    # A stable order keeps an unchanged comment byte-identical (no needless edit).
    return sorted(sections, key=lambda s: (s.role != "gate", s.runner))


def _revision_views(docs: Sequence[Results]) -> list[dict[str, Any]]:
    """Distinct revision records across runners, each with the runners that share it."""
    views: list[dict[str, Any]] = []
    for doc in docs:
        revisions = doc.get("revisions")
        if revisions is None:
            continue
        # The predecessor is per runner (shown in its section), not part of the shared record.
        revisions = {k: v for k, v in revisions.items() if k != "last_validated_predecessor"}
        for view in views:
            if view["revisions"] == revisions:
                view["runners"].append(doc["runner"]["name"])
                break
        else:
            views.append({"revisions": revisions, "runners": [doc["runner"]["name"]]})
    return views


def compose(
    env: Any,
    sections: Sequence[Section],
    docs: Sequence[Results],
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
    current_heads = {h for h in (head_sha(d) for d in docs) if h}
    rows = [
        {
            "runner": s.runner,
            "role": s.role,
            "state_label": _state_label(s.state),
            "head": s.head,
            "outdated": bool(current_heads) and s.head is not None and s.head not in current_heads,
        }
        for s in sections
    ]
    context = {
        "kind": kind,
        "rows": rows,
        "gate_sections": [s.text() for s in sections if s.role == "gate"],
        "control_sections": [s.text() for s in sections if s.role == "negative-control"],
        "control_names": [s.runner for s in sections if s.role == "negative-control"],
        "revision_views": _revision_views(docs),
        "run_url": run_url,
        "version": __version__,
        "shortened": shortened,
        "merge_status": markdown.Trusted("\n".join(merge_status)),
    }
    template = "summary.md.j2" if kind == "summary" else "comment.md.j2"
    body = _render(env, template, context)
    return f"{MARKER}\n{body}\n" if kind == "comment" else f"{body}\n"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def render(
    docs: Sequence[Results],
    *,
    kind: str = "comment",
    run_url: str | None = None,
    template_dir: Path | None = None,
    predecessors: Mapping[str, str] | None = None,
    existing: Sequence[Section] = (),
    extra: Sequence[Section] = (),
    limit: int | None = None,
    merge_status: Sequence[str] = (),
) -> tuple[str, list[Section]]:
    """Render ``docs`` (plus sections kept from an existing comment) within the size limit.

    Returns the body and the sections it contains. ``extra`` are pre-rendered sections of our
    own (e.g. a pending placeholder) that replace same-runner ones from ``existing``.
    Levels of detail are dropped uniformly until the body fits; sections kept from an
    existing comment are reduced to stubs only at the last level.
    """
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
                predecessor=predecessors.get(doc["runner"]["name"])
                or (doc["revisions"] or {}).get("last_validated_predecessor"),
                kind=kind,
            )
            for doc in docs
        ]
        kept = list(existing)
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
