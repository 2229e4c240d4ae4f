"""Judging recorded requests against the exactness contract (docs/protocol.md).

Pure functions over parsed records: no processes, no files. Each check appends a human reason;
a verdict is ``pass`` only when no reason was found.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from ds4ci.judging import counters as counting
from ds4ci.judging.answer import Answer
from ds4ci.judging.oracle import (
    ORACLE_TEXT,
    ORACLE_TRACE,
    TOKEN_ORACLES,
    Observed,
    RequestCheck,
    check_ids,
    first_of_exactly_one,
)
from ds4ci.judging.protocol import Mismatch, SpecSummary, first_mismatch
from ds4ci.records import MismatchRecord, PromptResult, Verdict

PASS: Final = "pass"  # noqa: S105 - a verdict, not a password
FAIL: Final = "fail"
ERROR: Final = "error"
NOT_RUN: Final = "not_run"
_SEVERITY: dict[Verdict, int] = {PASS: 0, NOT_RUN: 1, ERROR: 2, FAIL: 3}


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """A contract violation (fail) outranks "could not judge" (error), which outranks pass."""
    return max(verdicts, key=lambda v: _SEVERITY[v], default=PASS)


def ids_digest(ids: Sequence[int]) -> str:
    return hashlib.sha256(" ".join(str(i) for i in ids).encode("ascii")).hexdigest()


def check_target_only_request(obs: Observed, oracle: str = ORACLE_TRACE) -> RequestCheck:
    where = f"target-only prompt {obs.prompt_index} request {obs.repeat + 1}"
    # Speculation shown by the target-only server is judged server-wide (attribution.attribute).
    result = check_ids(obs, where, oracle, 0, 0)
    if obs.answer is not None and obs.answer.spec_decode_ran is True:
        result.reasons.append(f"{where}: the answer says usage.spec_decode_ran=true in the arm without speculation")
    return result


def _counter_reasons(where: str, summary: SpecSummary, found: counting.Counters, oracle: str) -> tuple[
        list[str], list[str]]:
    """(reasons that fail, reasons that leave the rejection unproven: error) of one request's counters."""
    reasons = [f"{where}: {c}" for c in found.contradictions]
    if oracle == ORACLE_TRACE and summary.matched is None:
        return [*reasons, (
            f"{where}: the summary has no matched/offered counters; a build that prints the [ds4-exact-verify-trace] "
            "protocol must print the countered summary (gen= steps= matched= offered= ... full_snap=)"
        )], []
    if found.matched_max is None or found.offered is None:
        return reasons, ([f"{where}: no counters: {found.missing}"] if found.missing else [])
    how = "" if found.source == counting.PRINTED else " (derived from the counterless summary)"
    matched = f"matched={found.matched}" if found.matched is not None else (
        f"matched={found.matched_min}..{found.matched_max}, of which the safe bound is {found.matched_max}")
    if found.offered <= 0:
        reasons.append(f"{where}: offered={found.offered}{how}; no drafts were offered (expected > 0)")
    if found.matched_max > found.offered:
        reasons.append(f"{where}: {matched} exceeds offered={found.offered}")
    elif found.matched_max == found.offered:
        return reasons, [
            f"{where}: no rejection observed ({matched} == offered={found.offered}{how}); "
            "rollback was never exercised, so exactness is unproven"
        ]
    return reasons, []


def _answer_agrees(where: str, obs: Observed, summary: SpecSummary, ids: tuple[int, ...] | None) -> list[str]:
    """The counterless dialect's cross-checks of the answer against the request's own lines."""
    reasons = []
    if obs.answer is not None and obs.answer.spec_decode_ran is False:
        reasons.append(f"{where}: the answer says usage.spec_decode_ran=false: this request did not speculate")
    if ids is None:
        return reasons
    if summary.gen + 1 != len(ids):
        reasons.append(
            f"{where}: the summary says gen={summary.gen} but the answer has {len(ids)} token(s); the loop emits every "
            "token after the first (which prefill gives), so gen must be one less"
        )
    traced = [t.token for t in obs.log.tokens]
    if traced and traced != list(ids[1:]):
        mismatch = first_mismatch(ids[1:], traced)
        at = f" (first difference at output {mismatch.position})" if mismatch else ""
        reasons.append(f"{where}: the per-token trace's token= values are not the answer's tokens after the first{at}")
    return reasons


def check_spec_request(obs: Observed, q: int, oracle: str = ORACLE_TRACE) -> RequestCheck:
    """Clauses 2, 4 and 5 for one reference-exact request (the banner is judged per server)."""
    where = f"q={q} prompt {obs.prompt_index} request {obs.repeat + 1}"
    result = check_ids(obs, where, oracle, 1, 1)
    if not obs.attributed and not obs.log.summaries:
        return result
    summary = first_of_exactly_one(obs.log.summaries, "[ds4-spec] gen=... summary", where, result.reasons)
    if summary is None:
        return result
    result.summary = summary
    if summary.steps <= 0:
        result.reasons.append(f"{where}: steps={summary.steps}; speculation did not run (expected steps > 0)")
    found = counting.derive(summary, q, obs.log.steps, obs.log.step_lines, obs.log.tokens)
    result.counters = found
    failing, unproven = _counter_reasons(where, summary, found, oracle)
    result.reasons += failing + unproven
    result.unproven += unproven
    if summary.matched is None and oracle != ORACLE_TRACE:
        result.reasons += _answer_agrees(where, obs, summary, result.ids if oracle in TOKEN_ORACLES else None)
    if summary.full_snap != 1:
        result.reasons.append(f"{where}: full_snap={summary.full_snap}, expected full_snap=1 (full rollback snapshots)")
    if summary.q_cap != q:
        result.reasons.append(f"{where}: q_cap={summary.q_cap} but the server was started with width q={q}")
    return result


@dataclass(frozen=True)
class TargetReference:
    """The target-only IDs per prompt, or why they cannot serve as the oracle."""

    ids: dict[int, tuple[int, ...]]
    verdict: Verdict
    reasons: list[str]
    deterministic: bool
    answers: dict[int, Answer] = field(default_factory=dict)  # the first request's answer per prompt


_CONTRADICTS = "the server's answer contradicts its own trace"


def _words_differ(where: str, first: Answer | None, other: Answer | None, same_ids_as: str) -> list[str]:
    """A reason when two answers whose token IDs are equal differ in text or finish_reason."""
    if first is None or other is None or first.same_words(other):
        return []
    what = "text" if first.text != other.text else f"finish_reason ({first.finish_reason!r} vs {other.finish_reason!r})"
    return [f"{where}: {_CONTRADICTS} (the same token IDs as {same_ids_as}, a different {what})"]


def judge_target_only(
    observed: Sequence[Observed], prompt_count: int, server_problems: Sequence[str] = (), oracle: str = ORACLE_TRACE,
) -> TargetReference:
    reasons: list[str] = [f"target-only: {p}" for p in server_problems]
    ids: dict[int, tuple[int, ...]] = {}
    answers: dict[int, Answer] = {}
    deterministic = True
    for index in range(prompt_count):
        runs = [o for o in observed if o.prompt_index == index]
        checks = [check_target_only_request(o, oracle) for o in runs]
        for check in checks:
            reasons.extend(check.reasons)
        found = [c.ids for c in checks if c.ids is not None]
        if not runs or len(found) != len(runs):
            continue
        first = found[0]
        prompt_deterministic = True
        for other, run in zip(found[1:], runs[1:], strict=True):
            if other != first:
                deterministic = prompt_deterministic = False
                mismatch = first_mismatch(first, other)
                detail = _describe(mismatch, oracle).replace("reference-exact", f"request {run.repeat + 1}")
                reasons.append(
                    f"target-only decoding is not deterministic; parity cannot be judged "
                    f"(prompt {index}, request {run.repeat + 1} differs from request 1: {detail})"
                )
        if prompt_deterministic:
            ids[index] = first
            for run in runs[1:]:
                reasons += _words_differ(
                    f"target-only prompt {index} request {run.repeat + 1}", runs[0].answer, run.answer, "request 1"
                )
            if runs[0].answer is not None:
                answers[index] = runs[0].answer
    verdict: Verdict
    if not deterministic:
        verdict = ERROR
    elif reasons:
        verdict = FAIL
    else:
        verdict = PASS
    return TargetReference(ids, verdict, reasons, deterministic, answers)


def _describe(mismatch: Mismatch | None, oracle: str) -> str:
    """A first difference in the oracle's own words: text parity names characters, never token IDs."""
    if mismatch is None:
        return ""
    if oracle != ORACLE_TEXT:
        return mismatch.describe()
    return (
        f"the answer texts first differ at character {mismatch.position} (target-only has {mismatch.target_len} "
        f"characters, reference-exact {mismatch.spec_len}): target-only {_chars(mismatch.target_ids)} vs "
        f"reference-exact {_chars(mismatch.spec_ids)}"
    )


def _chars(codes: Sequence[int]) -> str:
    return repr("".join(chr(c) for c in codes))


def _mismatch_json(m: Mismatch) -> MismatchRecord:
    return {
        "position": m.position,
        "window_start": m.window_start,
        "target_ids": list(m.target_ids),
        "spec_ids": list(m.spec_ids),
        "target_len": m.target_len,
        "spec_len": m.spec_len,
    }


@dataclass(frozen=True)
class _Parity:
    """Clause 1 for one cell: how many requests gave the target-only IDs, the first mismatch, reasons."""

    requests: int
    mismatch: Mismatch | None
    reasons: list[str]


def _parity(
    where: str, target_ids: Sequence[int], checks: Sequence[RequestCheck], runs: Sequence[Observed],
    target_answer: Answer | None, oracle: str = ORACLE_TRACE,
) -> _Parity:
    parity = 0
    contradictions: list[str] = []
    mismatch: Mismatch | None = None
    # Requests that differ in the same way are reported once, naming all of them.
    differing: dict[str, list[int]] = {}
    for check, obs in zip(checks, runs, strict=True):
        if check.ids is None:
            continue
        found = first_mismatch(target_ids, check.ids)
        if found is None:
            parity += 1
            request = f"{where} request {obs.repeat + 1}"
            contradictions += _words_differ(request, target_answer, obs.answer, "the target-only answer")
        else:
            mismatch = mismatch or found
            differing.setdefault(_describe(found, oracle), []).append(obs.repeat + 1)
    reasons = []
    what = "answer texts differ (text parity)" if oracle == ORACLE_TEXT else "token IDs differ"
    for description, requests in differing.items():
        which = f"request {requests[0]}" if len(requests) == 1 else f"requests {', '.join(map(str, requests))}"
        reasons.append(f"{where} {which}: {what}: {description}")
    return _Parity(parity, mismatch, reasons + contradictions)


@dataclass(frozen=True)
class _Repeats:
    """Clause 3 for one cell: the repeats of a prompt on one server agree on IDs and counters."""

    ids_identical: bool
    counters_identical: bool
    rejection: bool
    reasons: list[str]


def _repeats(where: str, checks: Sequence[RequestCheck], runs: int, oracle: str = ORACLE_TRACE) -> _Repeats:
    reasons = []
    present = [c.ids for c in checks if c.ids is not None]
    ids_identical = len(present) == runs and all(ids == present[0] for ids in present)
    if len(present) == runs and not ids_identical:
        what = "answer texts" if oracle == ORACLE_TEXT else "token IDs"
        reasons.append(f"{where}: repeated requests on one server gave different {what}")
    summaries = [c.summary for c in checks if c.summary is not None]
    counters = [s.counters() for s in summaries]
    counters_identical = len(counters) == runs and all(c == counters[0] for c in counters)
    if len(counters) == runs and not counters_identical:
        reasons.append(f"{where}: repeated requests on one server gave different speculation counters")
    found = [c.counters for c in checks if c.counters is not None and c.counters.source is not None]
    rejection = bool(found) and len(found) == runs and all(
        c.matched_max is not None and c.offered is not None and c.matched_max < c.offered for c in found)
    return _Repeats(ids_identical, counters_identical, rejection, reasons)


def judge_width_prompt(
    q: int, prompt_index: int, prompt_sha256: str, observed: Sequence[Observed], reference: TargetReference,
    banner_seen: bool,
    server_problems: Sequence[str] = (),
    oracle: str = ORACLE_TRACE,
) -> PromptResult:
    """One width x prompt cell of the results: clauses 1-5, 7 and 8."""
    where = f"q={q} prompt {prompt_index}"
    runs = [o for o in observed if o.prompt_index == prompt_index]
    checks = [check_spec_request(o, q, oracle) for o in runs]
    reasons = [f"q={q}: {p}" for p in server_problems]
    reasons += list(dict.fromkeys(r for c in checks for r in c.reasons))
    if not runs:
        reasons.append(f"{where}: no reference-exact request was recorded")
    if not banner_seen:
        reasons.append(f"q={q}: the reference-exact activation banner '[ds4-spec] reference-exact verifier:' is missing")
    target_ids = reference.ids.get(prompt_index)
    target_answer = reference.answers.get(prompt_index)
    parity = (_parity(where, target_ids, checks, runs, target_answer, oracle) if target_ids is not None
              else _Parity(0, None, []))
    repeats = _repeats(where, checks, len(runs), oracle)
    reasons += parity.reasons + repeats.reasons
    verdict: Verdict
    if target_ids is None:
        verdict = ERROR if not reference.deterministic or reference.verdict == ERROR else FAIL
        reasons.append(f"{where}: no usable target-only reference for this prompt")
    else:
        unproven = {r for c in checks for r in c.unproven}
        verdict = FAIL if any(r not in unproven for r in reasons) else ERROR if reasons else PASS
    tokens = oracle in TOKEN_ORACLES  # text parity has characters, not token counts
    first_ids = next((c.ids for c in checks if c.ids is not None), None) if tokens else None
    first_summary = next((c.summary for c in checks if c.summary is not None), None)
    first_counters = next((c.counters for c in checks if c.counters is not None), None)
    return {
        "prompt_index": prompt_index,
        "prompt_sha256": prompt_sha256,
        "verdict": verdict,
        "reasons": reasons,
        "requests": len(runs),
        "parity_requests": parity.requests,
        "tokens_target": len(target_ids) if target_ids is not None and tokens else None,
        "tokens_spec": len(first_ids) if first_ids is not None else None,
        "steps": first_summary.steps if first_summary else None,
        "matched": first_counters.matched if first_counters else None,
        "offered": first_counters.offered if first_counters else None,
        "matched_min": first_counters.matched_min if first_counters else None,
        "matched_max": first_counters.matched_max if first_counters else None,
        "counters": first_counters.source if first_counters else None,
        "rejection_observed": repeats.rejection,
        "rejected_drafts": (first_counters.offered - first_counters.matched_max
                            if first_counters and first_counters.matched_max is not None
                            and first_counters.offered is not None else None),
        "full_snap_claimed": (first_summary.full_snap == 1) if first_summary else None,
        "banner_claimed": banner_seen,
        "repeats_identical": repeats.ids_identical,
        "counters_identical": repeats.counters_identical,
        "mismatch": _mismatch_json(parity.mismatch) if parity.mismatch and tokens else None,
    }
