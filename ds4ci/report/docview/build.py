"""One view of a runner's results document, computed once: everything its status, check run, comment section
and job summary say.

:func:`view_of` is the one place that reads a validated document (``ds4ci.records.Results``); the renderers
(``ds4ci.report.render``, ``ds4ci.report.views``) and the publisher (``ds4ci.github``) read the
:class:`DocView` it builds, never the document (``tests/unit/report/test_one_view.py`` says so).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ds4ci.gate.settings import scope_note
from ds4ci.judging.coverage import compact_line
from ds4ci.judging.tree import tree_line, tree_note
from ds4ci.records import FileIdentity, Results
from ds4ci.report.docview import difference, figures, judged, vocab, words
from ds4ci.report.docview.difference import Difference
from ds4ci.report.docview.figures import WidthFigures
from ds4ci.report.docview.places import Annotation, find
from ds4ci.report.glance import grouped_reasons

# The parts of a document a section shows as they are (the folded detail): the template reads them as ``r``.
SHOWN = ("verdict", "warnings", "fingerprint", "build", "containment", "evidence", "settings", "server",
         "identities", "reproduce", "ds4ci_version", "widths", "provenance", "checks")


@dataclass(frozen=True)
class Cell:
    """One width x prompt, as the terminal table and the JUnit file list it."""

    q: int
    prompt_index: int
    verdict: str
    reasons: tuple[str, ...]
    parity_requests: int
    requests: int
    steps: int | None
    span: str | None  # drafts accepted (figures.matched_span), None without counters
    offered: int | None
    rejected: int | None
    full_snap: bool | None


@dataclass(frozen=True)
class WidthLine:
    """One width: its verdict, its reasons and its cells."""

    q: int
    verdict: str
    reasons: tuple[str, ...]
    cells: tuple[Cell, ...]


def _width_lines(doc: Results) -> tuple[WidthLine, ...]:
    return tuple(WidthLine(w["q"], w["verdict"], tuple(w["reasons"]), tuple(
        Cell(w["q"], p["prompt_index"], p["verdict"], tuple(p["reasons"]), p["parity_requests"], p["requests"],
             p["steps"], figures.matched_span([p]), p["offered"], p["rejected_drafts"], p["full_snap_claimed"])
        for p in w["prompts"])) for w in doc["widths"])


@dataclass(frozen=True)
class DocView:
    """What ds4ci says about one runner's document."""

    name: str
    role: str
    negative_control_for: str | None
    verdict: str  # pass | fail | error | not_run
    state: str  # the commit status it earns: success | failure | error (judged.status_state)
    head: str | None
    headline: str  # what passed, or the first reason it did not
    blocker: str  # what blocks, in the pull request's headline ("fails parity at q=3, position 42")
    problem: str | None  # why no verdict was reached (words.error_kind): a runner problem or the server crashed
    first_place: str | None  # where the answers first differed ("q=3, position 42")
    rollback: str  # what the server claimed about rollback versus what the gate tested
    coverage: tuple[str, ...]  # the coverage words of each width that has coverage
    digest: str  # SHA-256 of the canonical document: identifies it in the comment
    focused: bool  # a focused rerun ([gate] scope = "focused")
    qs: tuple[int, ...]  # the widths it ran
    widths_asked: tuple[int, ...]  # the widths its settings asked for (a run that stopped early ran none)
    reasons: tuple[str, ...]  # each cause once (glance.grouped_reasons)
    first_reason: str  # the document's first reason as recorded ("" without one)
    tree: str | None  # "built from a modified tree" beyond what the reasons say (judging.tree.tree_line)
    tree_note: str | None  # the tree's note itself, for the status description
    figures: tuple[WidthFigures, ...]  # per width: drafts accepted of offered, its server's run time
    gate_s: float  # the whole gate's wall-clock seconds
    differences: tuple[Difference, ...]  # each distinct first difference, with its words where decodable
    annotations: tuple[Annotation, ...]  # the failing build's and checks' places in the PR's files
    annotations_left: int  # how many more than fit one check-run request
    gate_rows: tuple[dict[str, Any], ...]
    prompt_rows: tuple[dict[str, Any], ...]
    multi_prompt: bool  # a width ran more than one prompt (the per-prompt table is shown)
    parity_column: str
    arm_evidence: tuple[str, ...]
    artifacts: tuple[FileIdentity, ...]
    check_words: tuple[str, ...]
    containment: str
    signing: str | None
    target_only: str
    toolchain: tuple[tuple[str, str], ...]
    host: tuple[tuple[str, str], ...]
    diagnostics: str | None
    server_logs: tuple[tuple[int, str], ...]  # failing widths' server logs, as paths in the artifact
    rejected_drafts: int | None
    lifecycle_ok: bool
    revisions: dict[str, Any] | None  # the revisions record without the per-runner predecessor
    predecessor: str | None  # the last hardware-validated predecessor the run recorded
    manifest: str | None  # the evidence manifest's SHA-256
    reproduce: str  # the runner-local command the run recorded (the check run's text)
    warnings: tuple[str, ...]
    checks: tuple[dict[str, Any], ...]  # each check's record (name, status, counts, log tail)
    width_lines: tuple[WidthLine, ...]  # per width and prompt (the terminal table, the JUnit file)
    scope: str  # " (focused rerun: ...)" for a focused run, else ""
    coverage_lines: tuple[str, ...]  # each width's coverage in one compact line (the terminal's)
    all_reasons: tuple[str, ...]  # the reasons as recorded, each in full
    evidence_dir: str  # where the evidence folder is on the runner
    started_at: str
    build_step: tuple[str, str, float] | None  # the build's (status, summary, seconds)
    target_verdict: str
    target_reasons: tuple[str, ...]
    configured_widths: tuple[int, ...]  # the widths the runner's config names (a focused rerun may run fewer)
    shown: dict[str, Any] = field(repr=False, compare=False)  # SHOWN: the folded detail as recorded
    source: Results = field(repr=False, compare=False)  # the document itself: read only in ds4ci.report.docview

    @property
    def passed(self) -> bool:
        return self.state == "success"


def digest_of(doc: Results) -> str:
    """SHA-256 of the canonical JSON of a results document (identifies it in the comment)."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _artifacts(doc: Results) -> tuple[FileIdentity, ...]:
    ids = doc["identities"]
    entries = [ids["server_bin"], ids["target"], ids["draft"], *ids["prompts"]]
    return tuple(e for e in entries if e is not None)


def _failed_logs(doc: Results) -> list[tuple[str, str]]:
    build = doc.get("build")
    logs = [("build", build["log_tail"])] if build and build["status"] != "pass" else []
    return logs + [(c["name"], c["log_tail"]) for c in doc["checks"] if c["status"] != "pass"]


def view_of(doc: Results, decode: vocab.Decoder | None = None, *, read_vocab: bool = True) -> DocView:
    """The view of one validated document; ``decode``: how its target's token IDs read as text (default: the
    tiny models' words, or the target GGUF's vocabulary where the file is at hand and ``read_vocab``)."""
    differs = any(p["mismatch"] is not None for w in doc["widths"] for p in w["prompts"])
    if decode is None and read_vocab and differs:  # a vocabulary is read only where there is a difference to show
        decode = vocab.decoder(doc)
    revisions = doc["revisions"]
    build = doc.get("build")
    rows = figures.gate_rows(doc)
    notes, left = find(_failed_logs(doc), build["cwd"] if build else None)
    fingerprint = doc["fingerprint"]
    found = difference.differences(doc, decode)
    place = difference.first_place(found)
    return DocView(
        name=doc["runner"]["name"], role=doc["runner"]["role"],
        negative_control_for=doc["runner"].get("negative_control_for"), verdict=doc["verdict"],
        state=judged.status_state(doc), head=revisions["head"]["sha"] if revisions is not None else None,
        headline=words.headline(doc), blocker=words.blocker(doc, place), problem=words.error_kind(doc),
        first_place=place, rollback=words.rollback_words(doc),
        coverage=tuple(words.coverage_words(w["coverage"]) for w in doc["widths"] if "coverage" in w),
        digest=digest_of(doc), focused=doc["settings"].get("scope") == "focused",
        qs=tuple(w["q"] for w in doc["widths"]), widths_asked=tuple(doc["settings"]["widths"]),
        reasons=tuple(grouped_reasons(doc["reasons"])),
        first_reason=doc["reasons"][0] if doc["reasons"] else "",
        tree=tree_line(revisions, doc["settings"], doc["reasons"]), tree_note=tree_note(revisions),
        figures=figures.width_figures(doc), gate_s=figures.gate_seconds(doc),
        differences=found, annotations=notes, annotations_left=left,
        gate_rows=tuple(rows), prompt_rows=tuple(figures.prompt_rows(doc)),
        multi_prompt=sum(len(w["prompts"]) for w in doc["widths"]) > len(doc["widths"]),
        parity_column=words.parity_column(doc), arm_evidence=tuple(words.arm_evidence(doc)),
        artifacts=_artifacts(doc), check_words=tuple(words.check_words(c) for c in doc["checks"]),
        containment=words.containment_label(doc), signing=words.signing_label(doc),
        target_only=words.target_only_words(doc),
        toolchain=tuple(words.present(fingerprint["toolchain"])) if fingerprint else (),
        host=tuple(words.present(fingerprint["host"], words.HOST_KEYS)) if fingerprint else (),
        diagnostics=words.in_bundle(doc, doc["evidence"]["diagnostics"]),
        server_logs=tuple((w["q"], log) for w in doc["widths"]
                          if w["verdict"] != "pass" and (log := words.in_bundle(doc, w["server_log"]))),
        rejected_drafts=figures.rejected_drafts(doc),
        lifecycle_ok=all(r["repeats_identical"] and r["counters_identical"] for r in rows),
        revisions=({k: v for k, v in revisions.items() if k != "last_validated_predecessor"}
                   if revisions is not None else None),
        predecessor=revisions["last_validated_predecessor"] if revisions is not None else None,
        manifest=doc["evidence"]["manifest_sha256"], reproduce=doc["reproduce"],
        warnings=tuple(doc.get("warnings", [])), checks=tuple(dict(c) for c in doc["checks"]),
        configured_widths=tuple(doc["settings"].get("configured_widths") or ()),
        width_lines=_width_lines(doc), scope=scope_note(doc["settings"]),
        coverage_lines=tuple(compact_line(w["coverage"]) for w in doc["widths"] if "coverage" in w),
        all_reasons=tuple(doc["reasons"]), evidence_dir=doc["evidence"]["dir"], started_at=doc["started_at"],
        build_step=(build["status"], build["summary"], build["duration_s"]) if build else None,
        target_verdict=doc["target_only"]["verdict"], target_reasons=tuple(doc["target_only"]["reasons"]),
        shown={k: doc[k] for k in SHOWN if k in doc},  # type: ignore[literal-required]
        source=doc,
    )


def with_warning(view: DocView, note: str) -> DocView:
    """The view of the same document with ``note`` first among its warnings (a focused rerun's decision): the
    document shown has its own digest; its headline, claims and coverage words do not read the warnings."""
    doc: Results = {**view.source, "warnings": [note, *view.source.get("warnings", [])]}
    return replace(view, warnings=tuple(doc["warnings"]), digest=digest_of(doc),
                   shown={**view.shown, "warnings": doc["warnings"]}, source=doc)


Viewable = DocView | Mapping[str, Any]  # a runner's view, or a validated results document to view


def as_views(items: Sequence[Viewable], *, read_vocab: bool = True) -> list[DocView]:
    """Each item's view: a :class:`DocView` as it is, a validated document viewed once here (``read_vocab``: its
    target's vocabulary read for the first difference's words; the terminal's forms show IDs only)."""
    return [item if isinstance(item, DocView) else view_of(cast(Results, item), read_vocab=read_vocab)
            for item in items]
