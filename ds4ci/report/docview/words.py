"""What a runner's document says, in words: its headline, rollback claimed versus tested, each arm, each check.

Pure functions of a validated results document (``ds4ci.records``); only the view builder
(:mod:`ds4ci.report.docview.build`) calls them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ds4ci.judging import profile
from ds4ci.judging.oracle import ORACLE_EXACT, ORACLE_TEXT, ORACLE_TRACE, ORACLE_WORDS
from ds4ci.records import Results
from ds4ci.report import markdown
from ds4ci.report.glance import grouped_reasons

REASON_CHARS = 160  # one line of the top table
# Where a boundary kind's rejected drafts are, in the words of a reviewer of an inference engine.
PLAIN_BOUNDARIES = {"ratio4": "4-token compression boundary", "ratio128": "128-token compression boundary",
                    "window": "128-token window wrap"}
# Where the token IDs the gate compared came from, in plain words.
PLAIN_ORACLES = {ORACLE_TRACE: "the server's token trace", ORACLE_EXACT: "the exact-differential trace",
                 ORACLE_WORDS: "the tiny model's words"}


def fmt_int(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


def sum_or_none(values: Iterable[object]) -> int | None:
    total = 0
    for value in values:
        if not isinstance(value, int):
            return None
        total += value
    return total


def _at_widths(qs: Sequence[int]) -> str:
    return "q=" + ",".join(map(str, qs))


def rollback_words(doc: Results) -> str:
    """What the run says about rollback, split into what the server claimed and what the gate tested.

    The server's own lines claim it (the reference-exact banner, ``full_snap=1``); nothing the gate reads
    shows a restore happening. What the gate tests is token parity of complete answers in which the
    server's counters report rejected drafts, and, where per-step lines fix them, at which boundaries."""
    widths = [w for w in doc["widths"] if w["prompts"]]
    if not widths:
        return ""
    said = [w["q"] for w in widths if all(p["banner_claimed"] and p["full_snap_claimed"] for p in w["prompts"])]
    claim = (f"claimed by the server (its reference-exact banner and full_snap=1) at {_at_widths(said)}"
             if said else "not claimed by the server at any width")
    tested = []
    for w in widths:
        rejected = sum_or_none(p["rejected_drafts"] for p in w["prompts"])
        parity = all(p["parity_requests"] == p["requests"] > 0 for p in w["prompts"])
        cov = w.get("coverage")
        b = cov["boundaries"] if cov else None
        at = [f"a {name} (first at {', '.join(map(str, b[k]['first_rejected_positions']))})"  # type: ignore[literal-required]
              if b[k]["first_rejected_positions"] else f"a {name}"  # type: ignore[literal-required]
              for k, name in PLAIN_BOUNDARIES.items() if b and b[k]["rejected_at_boundary"]]  # type: ignore[literal-required]
        where = f", with rejected drafts at {'; '.join(at)}" if at else ""
        held = "identical answers" if parity else "answers that differ"
        tested.append(f"q={w['q']}: {held} after {fmt_int(rejected)} rejected drafts{where}")
    return f"{claim}. What the gate tested: {'; '.join(tested)}."


def first_line(value: str) -> str:
    """A reason's first line (a reason may quote a log tail below it), whitespace collapsed."""
    lines = value.strip().splitlines()
    return " ".join(lines[0].split()) if lines else ""


def headline(doc: Results) -> str:
    """The runner's result in one line: what passed, or the first reason it did not."""
    if doc["verdict"] == "pass" and doc["runner"]["role"] == "negative-control":
        return f"{len(doc['checks'])} check(s) passed; no parity claim"
    if doc["verdict"] == "pass":
        widths = ",".join(str(w["q"]) for w in doc["widths"])
        oracle = doc["target_only"].get("oracle")
        if oracle == ORACLE_TEXT:
            return (f"text parity (the answers' text, not token IDs) at q={widths}, "
                    f"{doc['settings']['max_tokens']} tokens")
        source = PLAIN_ORACLES.get(str(oracle)) if oracle else None
        return f"token parity at q={widths}, {doc['settings']['max_tokens']} tokens" + (
            f" (token IDs from {source})" if source else "")
    reasons = grouped_reasons(doc["reasons"])
    if not reasons:
        return "no reason recorded"
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return markdown.cut_at_word(first_line(reasons[0]), REASON_CHARS - len(more)) + more


def coverage_words(rec: Any) -> str:
    """A width's coverage in plain words (the terms of docs/results.md, "Proof coverage of one width")."""
    q = rec["width"]
    hist, bounds = rec["accept_histogram"], rec["boundaries"]
    if hist is None:
        return f"q={q}: not measurable from the lines the server printed"
    steps = sum(hist)
    full = hist[-1] if hist else 0
    words = [f"q={q}: {steps} verify steps seen, {steps - full} with a rejected draft"]
    if bounds is not None:
        crossed = [f"{bounds[k]['batches']} crossed a {name} ({bounds[k]['rejected']} with a rejection)"
                   for k, name in PLAIN_BOUNDARIES.items() if bounds[k]["batches"]]
        never = [f"a {name}" for k, name in PLAIN_BOUNDARIES.items() if not bounds[k]["batches"]]
        words += crossed
        if never:
            words.append("none crossed " + " or ".join(never))
    return "; ".join(words)


def arm_evidence(doc: Results) -> list[str]:
    """Per arm, in one short line: how parity was checked, where the counters came from, the lines the server printed."""
    arms: list[tuple[str, Any]] = [("target-only", doc["target_only"]), *((f"q={w['q']}", w) for w in doc["widths"])]
    lines = []
    for label, arm in arms:
        if "oracle" not in arm:
            continue
        sources = {p.get("counters") for p in arm.get("prompts", []) if "matched" in p}
        counters = f", counters {'/'.join(sorted(s or 'none' for s in sources))}" if sources else ""
        lines.append(f"{label}: {arm['oracle'] or 'no parity evidence'}{counters}; {profile.shown(arm.get('evidence', {}))}")
    return lines


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


def yes_no(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return "—"


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


_CRASH = re.compile(r"\bserver exited with\b|\bkilled by signal\b|\bsignal \d+\b|\bcrashed\b|\bcore dumped\b")
RUNNER_PROBLEM = "runner problem"
SERVER_CRASH = "the server crashed"


def error_kind(doc: Results) -> str | None:
    """Why a run reached no verdict: the pull request's server crashed, or a problem of the runner (a file, the GPU,
    a timeout, an interrupt); None for a run that reached one."""
    if doc["verdict"] not in ("error", "not_run"):
        return None
    said = " ".join(first_line(r) for r in doc["reasons"][:3])
    return SERVER_CRASH if _CRASH.search(said) else RUNNER_PROBLEM


def blocker(doc: Results, first_place: str | None) -> str:
    """What a runner's result says in the pull request's headline: ``fails parity at q=3, position 42``, ``does
    not build``, ``fails the check NAME``, or the first reason in a line."""
    build = doc.get("build")
    if build and build["status"] != "pass":
        said = first_line(build["summary"]).removeprefix("the build failed: ")
        return "does not build" + (f" ({markdown.cut_at_word(said, 80)})" if said else "")
    if first_place is not None:
        return f"fails parity at {first_place}"
    failed = [c["name"] for c in doc["checks"] if c["status"] != "pass"]
    if failed and doc["verdict"] == "fail":
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"fails the check {markdown.cut_at_word(failed[0], 60)}{more}"
    reasons = grouped_reasons(doc["reasons"])
    return markdown.cut_at_word(first_line(reasons[0]), 100) if reasons else "no reason recorded"
