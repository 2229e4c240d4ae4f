"""Counters as intervals, on the real numbers of the unchanged 41ee7d0 build at --max-tokens 192.

The H200 catalogue's second lease (``../shared/fixtures/real-server/h200-2026-12-04-catalogue/
control-192-tokens.txt``) failed the correct build at q=2, prompt 0, request 1 with: "no counters: the
counterless summary does not fix matched: mean_accept=0.71/1.00 over steps=112, gen=191 and the per-step
lines allow matched = 79..80". The summary below is that request's, in the build's own format
(``"[ds4-spec] gen=%d steps=%ld mean_accept=%.2f/%.2f q_cap=%d full_snap=%d"``, docs/protocol.md). The
per-step lines are what 41ee7d0 prints for the first steps of a q=2 request (``[ds4-spec-cmp]`` for steps
0..7, ``[ds4-spec-t]`` for steps 1..4 and every 32nd), copied verbatim from the real capture
``tests/data/real-server/h200-fork-41ee7d0-designs/w16-s015.control.bundle.tar.gz`` (servers/q2/stderr.log,
the same prompt's first request): the parsers and the arithmetic under test are the gate's own, with no
simulator between them and the build's text.
"""

from __future__ import annotations

from ds4ci.judging import counters
from ds4ci.judging.answer import Answer
from ds4ci.judging.oracle import ORACLE_TEXT, Observed
from ds4ci.judging.protocol import RequestLog, SpecSummary, classify
from ds4ci.judging.specsteps import SpecStep
from ds4ci.judging.verdict import ERROR, PASS, TargetReference, judge_width_prompt

SUMMARY_192 = "[ds4-spec] gen=191 steps=112 mean_accept=0.71/1.00 q_cap=2 full_snap=1"
REAL_STEP_LINES = (
    "[ds4-spec-cmp] step=0 pos=122 draft=[311 -1 -1] tgt=[311 638 -1 -1] acc=2",
    "[ds4-spec-t] step=1 q=2 acc=2 | draft=226.7 head=6.6 save=2.4 verify=202.9 probe(submit/wait)=0.0/0.0 apply=0.0 "
    "feat=0.0 ms (cum means)",
    "[ds4-spec-cmp] step=1 pos=124 draft=[949 -1 -1] tgt=[949 803 -1 -1] acc=2",
    "[ds4-spec-t] step=2 q=2 acc=2 | draft=119.3 head=5.1 save=2.3 verify=204.6 probe(submit/wait)=0.0/0.0 apply=0.0 "
    "feat=0.0 ms (cum means)",
    "[ds4-spec-cmp] step=2 pos=126 draft=[738 -1 -1] tgt=[743 919 -1 -1] acc=1",
    "[ds4-spec-t] step=3 q=2 acc=1 | draft=82.8 head=4.6 save=1.6 verify=204.6 probe(submit/wait)=0.0/0.0 apply=39.0 "
    "feat=0.0 ms (cum means)",
    "[ds4-spec-cmp] step=3 pos=127 draft=[738 -1 -1] tgt=[738 919 -1 -1] acc=2",
    "[ds4-spec-t] step=4 q=2 acc=2 | draft=64.5 head=4.4 save=1.3 verify=205.4 probe(submit/wait)=0.0/0.0 apply=29.2 "
    "feat=0.0 ms (cum means)",
    "[ds4-spec-cmp] step=4 pos=129 draft=[598 -1 -1] tgt=[598 325 -1 -1] acc=2",
    "[ds4-spec-cmp] step=5 pos=131 draft=[300 -1 -1] tgt=[374 533 -1 -1] acc=1",
    "[ds4-spec-cmp] step=6 pos=132 draft=[300 -1 -1] tgt=[300 533 -1 -1] acc=2",
    "[ds4-spec-cmp] step=7 pos=134 draft=[722 -1 -1] tgt=[722 632 -1 -1] acc=2",
    "[ds4-spec-t] step=32 q=2 acc=2 | draft=16.3 head=3.9 save=0.7 verify=206.6 probe(submit/wait)=0.0/0.0 apply=32.4 "
    "feat=0.0 ms (cum means)",
)


def _summary(line: str = SUMMARY_192) -> SpecSummary:
    record = classify(line)
    assert record is not None and record.summary is not None, line
    return record.summary


def _steps() -> list[SpecStep]:
    records = [classify(line) for line in REAL_STEP_LINES]
    assert all(r is not None and r.step is not None for r in records)
    return [r.step for r in records if r is not None and r.step is not None]


def test_the_real_192_token_summary_allows_79_to_80_and_the_safe_bound_proves_32_rejections() -> None:
    found = counters.derive(_summary(), 2, _steps(), REAL_STEP_LINES)
    assert found.contradictions == () and found.source == counters.DERIVED
    # 79/112 and 80/112 both print as 0.71; gen=191 <= matched + 112 <= 192 allows both too
    assert (found.matched, found.matched_min, found.matched_max, found.offered) == (None, 79, 80, 112)
    assert "allow matched = 79..80" in found.allowed
    assert found.offered is not None and found.matched_max is not None
    assert found.offered - found.matched_max == 32  # the fewest rejected drafts the evidence proves


def _request(repeat: int, line: str = SUMMARY_192) -> Observed:
    lines = REAL_STEP_LINES if line == SUMMARY_192 else ()
    steps = _steps() if lines else []
    log = RequestLog(traces=(), banners=1, summaries=(_summary(line),), problems=(), steps=tuple(steps),
                     step_lines=lines)
    return Observed(0, repeat, log, answer=Answer("the same answer", "length", 192))


def _cell(line: str = SUMMARY_192) -> dict[str, object]:
    answer = Answer("the same answer", "length", 192)
    reference = TargetReference({0: tuple(map(ord, answer.text or ""))}, PASS, [], True, {0: answer})
    return dict(judge_width_prompt(2, 0, "a" * 64, [_request(0, line), _request(1, line)], reference, True,
                                   oracle=ORACLE_TEXT))


def test_a_correct_build_passes_at_192_tokens_with_the_range_recorded() -> None:
    cell = _cell()
    assert cell["verdict"] == PASS, cell["reasons"]
    assert (cell["matched"], cell["matched_min"], cell["matched_max"], cell["offered"]) == (None, 79, 80, 112)
    assert cell["rejected_drafts"] == 32 and cell["rejection_observed"] is True and cell["counters"] == "derived"


def test_a_range_that_reaches_offered_is_an_error_naming_the_safe_bound_never_a_fail() -> None:
    # 400 steps without per-step lines, every draft but at most one accepted: mean 1.00 and gen=799 allow
    # 399..400, so the safe bound (400) proves no rejection; the answers agree, so nothing is proven wrong
    cell = _cell("[ds4-spec] gen=799 steps=400 mean_accept=1.00/1.00 q_cap=2 full_snap=1")
    reasons = cell["reasons"]
    assert cell["verdict"] == ERROR and isinstance(reasons, list)
    assert (cell["matched_min"], cell["matched_max"], cell["rejected_drafts"]) == (399, 400, 0)
    assert any("no rejection observed (matched=399..400, of which the safe bound is 400 == offered=400" in r
               for r in reasons), reasons
