"""View models for the templates: the numbers and fragments a runner's section shows.

Computed once here rather than in Jinja; every helper takes validated, typed records
(:mod:`ds4ci.records`). The formatting helpers double as the templates' filters
(:func:`ds4ci.report.render.environment`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.judging import profile
from ds4ci.judging.coverage import compact_line
from ds4ci.judging.oracle import ORACLE_TEXT
from ds4ci.judging.tree import tree_line
from ds4ci.records import FileIdentity, MismatchRecord, Results
from ds4ci.report import markdown
from ds4ci.report.docview import DocView, first_line, fmt_int, sum_or_none, view_of
from ds4ci.report.glance import COVERAGE_DOC, docs_link, grouped_reasons, matched_span, rejected_drafts
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


def claimed(value: object) -> str:
    """A server's claim in the report's words: it claimed it, it did not, or nothing was read (``None``)."""
    return "—" if value is None else ("claimed" if value else "not claimed")


def yes_no(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return "—"


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


def _gate_rows(doc: Results) -> list[dict[str, Any]]:
    rows = []
    for width in doc["widths"]:
        prompts = width["prompts"]
        snaps = [p["full_snap_claimed"] for p in prompts]
        unknown = not prompts or any(s is None for s in snaps)
        full_snap = claimed(None if unknown else all(snaps))
        offered = sum_or_none(p["offered"] for p in prompts) if prompts else None
        rows.append(
            {
                "q": width["q"],
                "verdict": width["verdict"],
                "parity": f"{sum(p['parity_requests'] for p in prompts)}/{sum(p['requests'] for p in prompts)}",
                "steps": fmt_int(sum_or_none(p["steps"] for p in prompts) if prompts else None),
                "matched_offered": f"{matched_span(prompts) or fmt_int(None)}/{fmt_int(offered)}",
                "rejected": fmt_int(sum_or_none(p["rejected_drafts"] for p in prompts) if prompts else None),
                "full_snap": full_snap,
                "tokens": "/".join(
                    [fmt_int(sum_or_none(p["tokens_target"] for p in prompts) if prompts else None),
                     fmt_int(sum_or_none(p["tokens_spec"] for p in prompts) if prompts else None)]
                ),
                "repeats_identical": all(p["repeats_identical"] for p in prompts) if prompts else None,
                "counters_identical": all(p["counters_identical"] for p in prompts) if prompts else None,
                "coverage": compact_line(width["coverage"]) if "coverage" in width else None,
            }
        )
    return rows


def _arm_evidence(doc: Results) -> list[str]:
    """Per arm, in one short line: the parity oracle, where the counters came from, the lines the server printed."""
    arms: list[tuple[str, Any]] = [("target-only", doc["target_only"]), *((f"q={w['q']}", w) for w in doc["widths"])]
    lines = []
    for label, arm in arms:
        if "oracle" not in arm:
            continue
        sources = {p.get("counters") for p in arm.get("prompts", []) if "matched" in p}
        counters = f", counters {'/'.join(sorted(s or 'none' for s in sources))}" if sources else ""
        lines.append(f"{label}: {arm['oracle'] or 'no oracle'}{counters}; {profile.shown(arm.get('evidence', {}))}")
    return lines


def _mismatch_block(mismatch: MismatchRecord) -> Trusted:
    """The IDs around the first differing position, aligned, with the position marked."""
    start = mismatch["window_start"]
    position = mismatch["position"]
    target = mismatch["target_ids"]
    spec = mismatch["spec_ids"]
    # Each column as wide as its widest cell (a marked ID carries its brackets), one space between columns, so a
    # marked ID never runs into its neighbour; a caret line points at the first differing column.
    count = max(len(target), len(spec))

    def cell(ids: Sequence[int], offset: int) -> str:
        if offset >= len(ids):
            return "·"
        return f"[{ids[offset]}]" if start + offset == position else str(ids[offset])

    columns = [[str(start + i), cell(target, i), cell(spec, i)] for i in range(count)]
    widths = [max(len(c) for c in column) for column in columns]

    def line(label: str, row: int) -> str:
        return f"{label:<16}" + " ".join(column[row].rjust(w) for column, w in zip(columns, widths, strict=True))

    marks = " ".join(("^" * w if start + i == position else " " * w) for i, w in enumerate(widths)).rstrip()
    body = "\n".join([line("position", 0), line("target-only", 1), line("reference-exact", 2), " " * 16 + marks])
    return markdown.code_block(body, limit=None)


def _failures(doc: Results) -> list[dict[str, Any]]:
    """One entry per distinct first difference: widths that differ the same way share one block (``qs``)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            if prompt["mismatch"] is not None:
                mm = prompt["mismatch"]
                key = (prompt["prompt_index"], mm["position"], mm["target_len"], mm["spec_len"], mm["window_start"],
                       tuple(mm["target_ids"]), tuple(mm["spec_ids"]))
                if key in out:
                    out[key]["qs"].append(width["q"])
                    continue
                out[key] = {
                    "q": width["q"],
                    "qs": [width["q"]],
                    "prompt_index": prompt["prompt_index"],
                    "position": mm["position"],
                    "target_len": mm["target_len"],
                    "spec_len": mm["spec_len"],
                    "block": _mismatch_block(mm),
                    "server_log": width["server_log"],
                }
    for entry in out.values():
        entry["widths"] = ",".join(map(str, entry["qs"]))
    return list(out.values())


def _artifacts(doc: Results) -> list[FileIdentity]:
    ids = doc["identities"]
    entries = [ids["server_bin"], ids["target"], ids["draft"], *ids["prompts"]]
    return [e for e in entries if e is not None]


CONTAINMENT_LABELS = {
    "sandbox": "sandbox (bubblewrap: PR code saw only an allowlist of files, no credentials, no ds4ci keys)",
    "pid-namespace": "pid-namespace (nothing outlived the gate, but PR code could read what the runner user reads)",
    "subreaper+sweep": "subreaper+sweep (the weakest level: PR code could read what the runner user reads)",
}


def containment_label(doc: Results) -> str:
    """What the containment level of a run's PR code means, for the comment."""
    if "containment" not in doc:
        return "not recorded"
    level = doc["containment"]
    return CONTAINMENT_LABELS.get(str(level), "not recorded") if level is not None else "no PR process ran"


SIGNING_LABELS = {"service": "signed with the gate service's key, which no job could read",
                  "job-key": "signed with a key this job's own user could read (signing = \"job-key\")",
                  "local": "signed outside GitHub Actions and the gate service", None: "not signed"}


def signing_label(doc: Results) -> str | None:
    """Whose key signed the run, for the comment; None where the results do not record it (an older ds4ci)."""
    return SIGNING_LABELS.get(doc["signing"], "not recorded") if "signing" in doc else None


def parity_column(doc: Results) -> str:
    """The parity column's heading: text parity ([gate] text_parity) is never shown as token parity."""
    return ORACLE_TEXT if doc["target_only"].get("oracle") == ORACLE_TEXT else "token parity"


def present(values: dict[str, str | None], keys: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """The (key, value) pairs that were recorded, in ``keys`` order (sorted by default); absent ones left out."""
    order = keys if keys is not None else sorted(values)
    return [(k, str(values[k])) for k in order if values.get(k) not in (None, "")]


HOST_KEYS = ("os", "kernel", "cpu")  # a glance; the fingerprint in the bundle has every field


_QUOTING_ARM = re.compile(r"(target-only|reference-exact q=[0-9,]+)(?=:| crashed)")
_NOTHING_QUOTED = ("(empty logs)",)  # what evidence of earlier versions quoted for two empty logs


def quote_of(reason: str) -> tuple[str, list[str]]:
    """What a reason quotes below its first line (a server's log lines), labelled with the arm whose log it is,
    or with "its reason"; no lines when it quotes nothing, or only that the logs were empty."""
    lines = reason.strip().splitlines()
    arm = _QUOTING_ARM.search(lines[0]) if lines else None
    quoted = lines[1:] if tuple(lines[1:]) != _NOTHING_QUOTED else []
    return (f"Log of {arm.group(1)}, quoted with its reason" if arm else "Quoted with its reason"), quoted


def target_only_words(doc: Results) -> str:
    """The target-only arm in the terminal's and the comment's words.

    Determinism is a fact about answers: an arm that never answered is not called nondeterministic.
    """
    target = doc["target_only"]
    if target["verdict"] == "not_run":
        return "not run"
    if not any(p["n"] is not None or p["ids_sha256"] is not None for p in target["prompts"]):
        unread = "oracle" in target and target["oracle"] is None  # answered or not, no IDs were read from it
        return f"{target['verdict']} ({'no parity oracle' if unread else 'no answer'})"
    return f"{target['verdict']} (deterministic: {yes_no(target['deterministic'])})"


def in_bundle(doc: Results, path: str | None) -> str | None:
    """``path`` relative to the evidence folder (its place in the uploaded artifact), or None outside it."""
    if not path:
        return None
    base = doc["evidence"]["dir"].rstrip("/")
    if path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return None if path.startswith("/") else path


def merge_words(revisions: dict[str, Any]) -> str:
    """The synthetic merge in words (never a raw status name)."""
    merge = revisions["synthetic_merge"]
    if merge["status"] == "clean":
        return "clean"
    if merge["status"] == "conflict":
        return "conflicts"
    if revisions["base"] is None and revisions["upstream"] is None:
        return "not checked (no base or upstream ref given)"
    if revisions["merge_base"] is None:
        return "not checked (no common ancestor in this clone)"
    return "not checked (git has no merge-tree --write-tree; 2.38 or newer needed)"


def head_label(revisions: dict[str, Any]) -> str | None:
    """The head's ref when it names something (a branch, refs/pull/N/head); ``HEAD`` says nothing."""
    ref = revisions["head"]["ref"]
    return None if not ref or ref == "HEAD" else str(ref)


def check_words(check: Any) -> str:
    """One check's result: the counts once (a parser's summary often starts with them), then the rest."""
    summary = str(check["summary"] or "")
    if check["total"] is None:
        exit_text = f"exit code {check['exit_code']}" if check["exit_code"] is not None else "no result"
        return summary or exit_text
    counts = f"{check['passed']}/{check['total']} passed"
    if summary.startswith(counts):
        return summary
    if check["failed"]:
        counts += f", {check['failed']} failed"
    if check["skipped"]:
        counts += f", {check['skipped']} skipped"
    return f"{counts} — {summary}" if summary else counts


def artifact_name(doc: Results) -> str:
    """The artifact the gate workflow uploads this runner's evidence as."""
    return f"ds4ci-evidence-{doc['runner']['name']}"


def artifact_url(run_url: str | None) -> str | None:
    return f"{run_url}#artifacts" if run_url else None


def runner_context(
    doc: Results, detail: Detail, run_url: str | None, predecessor: str | None, kind: str,
    seen: DocView | None = None,
) -> dict[str, Any]:
    """What runner.md.j2 shows of one document; ``seen``: its :class:`DocView`, where already computed."""
    words = seen or view_of(doc)
    verdict = doc["verdict"]
    head = words.head
    checks = doc["checks"]
    return {
        "kind": kind,
        "r": doc,
        "name": doc["runner"]["name"],
        "role": doc["runner"]["role"],
        "negative_control_for": doc["runner"].get("negative_control_for"),
        "verdict": verdict,
        "state_label": state_label(verdict),
        "detail": detail,
        "head": head,
        "predecessor": predecessor if verdict != "pass" else None,
        "gate_rows": _gate_rows(doc),
        "rollback_line": words.rollback,
        "parity_column": parity_column(doc),
        "arm_evidence": _arm_evidence(doc),
        "failures": _failures(doc),
        "artifacts": _artifacts(doc),
        "checks": checks,
        "log_checks": [
            c
            for c in checks
            if c["log_tail"] and (detail.log_tails == "all" or (detail.log_tails == "failed" and c["status"] != "pass"))
        ],
        "run_url": run_url,
        "digest": words.digest,
        "containment": containment_label(doc),
        "signing": signing_label(doc),
        "tree": tree_line(doc["revisions"], doc["settings"], doc["reasons"]),  # "built from a modified tree"
        "headline": words.headline,
        # The comment shows a passing gate runner as one collapsed line; the job summary and the check run in full.
        "glance": kind == "comment" and verdict == "pass" and doc["runner"]["role"] == "gate" and not detail.stub,
        "reason_lines": [first_line(r) for r in grouped_reasons(doc["reasons"])],
        "reason_more": [quote_of(r) for r in grouped_reasons(doc["reasons"])],
        "rejected_drafts": rejected_drafts(doc),
        "coverage_words": list(words.coverage),
        "coverage_doc": docs_link(*COVERAGE_DOC),
        "toolchain": present(doc["fingerprint"]["toolchain"]) if doc["fingerprint"] else [],
        "host": present(doc["fingerprint"]["host"], HOST_KEYS) if doc["fingerprint"] else [],
        "target_only": target_only_words(doc),
        "check_words": [check_words(c) for c in checks],
        "diagnostics": in_bundle(doc, doc["evidence"]["diagnostics"]),
        "server_logs": [(w["q"], in_bundle(doc, w["server_log"])) for w in doc["widths"]
                        if w["verdict"] != "pass" and in_bundle(doc, w["server_log"])],
        "artifact": artifact_name(doc),
        "artifact_url": artifact_url(run_url),
        "lifecycle_ok": all(r["repeats_identical"] and r["counters_identical"] for r in _gate_rows(doc)),
    }


def revision_views(docs: Sequence[Results]) -> list[dict[str, Any]]:
    """Distinct revision records across runners, each with the runners that share it."""
    views: list[dict[str, Any]] = []
    for doc in docs:
        if doc["revisions"] is None:
            continue
        # The predecessor is per runner (shown in its section), not part of the shared record.
        shared = {k: v for k, v in doc["revisions"].items() if k != "last_validated_predecessor"}
        for view in views:
            if view["revisions"] == shared:
                view["runners"].append(doc["runner"]["name"])
                break
        else:
            views.append({"revisions": shared, "runners": [doc["runner"]["name"]], "merge": merge_words(shared),
                          "ref": head_label(shared)})
    return views
