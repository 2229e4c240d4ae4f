"""View models for the templates: the numbers and fragments a runner's section shows.

Computed once here rather than in Jinja; every helper takes validated, typed records
(:mod:`ds4ci.records`). The formatting helpers double as the templates' filters
(:func:`ds4ci.report.render.environment`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.judging import profile
from ds4ci.judging.coverage import compact_line
from ds4ci.judging.tree import tree_line
from ds4ci.records import FileIdentity, MismatchRecord, Results
from ds4ci.report import markdown
from ds4ci.report.markdown import Trusted
from ds4ci.report.sections import UNVERIFIED, head_sha, results_digest


@dataclass(frozen=True)
class Detail:
    """How much of a runner's results a section shows; levels drop the least important first."""

    log_tails: str  # "all", "failed" or "none"
    per_prompt: bool
    artifacts: bool
    lists: int  # how many reasons / checks / conflicts are listed before "and N more"
    stub: bool = False


def fmt_int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


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


def _sum_or_none(values: Iterable[object]) -> int | None:
    total = 0
    for value in values:
        if not isinstance(value, int):
            return None
        total += value
    return total


def tail_lines(value: str, lines: int = 40) -> str:
    return "\n".join(value.splitlines()[-lines:])


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
                "steps": fmt_int(_sum_or_none(p["steps"] for p in prompts) if prompts else None),
                "matched_offered": f"{fmt_int(matched)}/{fmt_int(offered)}",
                "rejection": yes_no(all(p["rejection_observed"] for p in prompts) if prompts else None),
                "full_snap": full_snap,
                "tokens": "/".join(
                    [fmt_int(_sum_or_none(p["tokens_target"] for p in prompts) if prompts else None),
                     fmt_int(_sum_or_none(p["tokens_spec"] for p in prompts) if prompts else None)]
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


def runner_context(
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
        "state_label": state_label(verdict),
        "detail": detail,
        "head": head,
        "predecessor": predecessor if verdict != "pass" else None,
        "gate_rows": _gate_rows(doc),
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
        "digest": results_digest(doc),
        "containment": containment_label(doc),
        "tree": tree_line(doc["revisions"], doc["settings"], doc["reasons"]),  # "built from a modified tree"
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
            views.append({"revisions": shared, "runners": [doc["runner"]["name"]]})
    return views
