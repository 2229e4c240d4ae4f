"""Per-step lines and counters derived from counterless summaries, on the real lines of the fork build 41ee7d0.

``direct-probe.txt`` holds what the build printed with ``DFLASH_DS4_TIMING=1`` (started by hand, prompt 1,
96 tokens): ``[ds4-spec-cmp] step=0 pos=97 draft=[330 -1 -1] tgt=[772 912 -1 -1] acc=1`` and
``[ds4-spec-t] step=1 q=2 acc=1 | ...``; ``direct-probe-400-tokens.txt`` the summaries of 400-token runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import TESTS

from ds4ci.judging import counters
from ds4ci.judging.protocol import MALFORMED, STEP, TOKEN, classify, parse_summary
from ds4ci.judging.specsteps import COMPARE, TIMING, TOKEN_TRACE, SpecStep, loop_index
from ds4ci.judging.steplines import TokenLine, parse_compare, parse_token

FORK = TESTS / "data" / "real-server" / "h200-fork-41ee7d0"


def _probe_lines(width: int) -> list[str]:
    """The real per-step lines of the q=width arm of the direct probe."""
    text = (FORK / "direct-probe.txt").read_text(encoding="utf-8")
    section = text.split(f"== q{width}:")[1].split("\n== ")[0]
    return [line.strip() for line in section.splitlines() if line.strip().startswith(("[ds4-spec-cmp]", "[ds4-spec-t] step="))]


@pytest.mark.parametrize("q", [2, 3, 4])
def test_every_real_per_step_line_parses_with_acc_counting_the_seed(q: int) -> None:
    lines = _probe_lines(q)
    records = [classify(line) for line in lines]
    assert len(lines) == 12 and all(r is not None and r.kind == STEP for r in records)
    steps = [r.step for r in records if r is not None and r.step is not None]
    compare = [s for s in steps if s.source == COMPARE]
    timing = [s for s in steps if s.source == TIMING]
    assert [s.step for s in compare] == list(range(8)) and [s.step for s in timing] == [1, 2, 3, 4]
    # acc=1 on every line: the seed only, no draft accepted (the summaries' mean_accept=0.00)
    assert all(s.accepted == 0 and s.width == q for s in steps)
    assert [s.position for s in compare] == list(range(97, 105))
    assert [loop_index(s) for s in timing] == [0, 1, 2, 3]


def test_the_real_lines_derive_the_counters_of_the_real_summary() -> None:
    lines = _probe_lines(3)
    steps = [parse(line) for line in lines]
    summary = parse_summary("gen=95 steps=95 mean_accept=0.00/2.00 q_cap=3 full_snap=1")
    found = counters.derive(summary, 3, steps, lines)
    assert (found.matched, found.offered, found.source, found.contradictions) == (0, 190, counters.DERIVED, ())


def parse(line: str) -> SpecStep:
    record = classify(line)
    assert record is not None and record.step is not None, line
    return record.step


def test_a_compare_line_that_contradicts_itself_is_malformed() -> None:
    line = "[ds4-spec-cmp] step=0 pos=97 draft=[330 330 -1] tgt=[772 912 912 -1] acc=2"
    record = classify(line)
    assert record is not None and record.kind == MALFORMED
    assert "acc=2 contradicts the line's own tokens: 0 leading candidate(s) equal the target's" in record.reason
    accepted = parse_compare("step=3 pos=100 draft=[912 589 -1] tgt=[912 589 553 -1] acc=3")
    assert (accepted.accepted, accepted.width) == (2, 3)


def test_two_lines_that_disagree_on_a_step_fail_naming_both() -> None:
    lines = _probe_lines(2)
    lines[1] = lines[1].replace("acc=1", "acc=2")  # [ds4-spec-t] step=1 ... now says the draft was accepted
    steps = [parse(line) for line in lines]
    summary = parse_summary("gen=95 steps=95 mean_accept=0.00/1.00 q_cap=2 full_snap=1")
    found = counters.derive(summary, 2, steps, lines)
    (problem, *rest) = found.contradictions
    assert problem.startswith("two per-step lines disagree on step 0 (0-based): [ds4-spec-cmp] step=0 pos=97")
    assert "vs [ds4-spec-t] step=1 q=2 acc=2" in problem
    assert rest == [] and (found.matched, found.source) == (None, None)  # contradicting evidence derives nothing


def test_a_per_step_line_of_another_width_contradicts_the_fixed_width() -> None:
    lines = _probe_lines(4)
    summary = parse_summary("gen=95 steps=95 mean_accept=0.00/2.00 q_cap=3 full_snap=1")
    found = counters.derive(summary, 3, [parse(line) for line in lines], lines)
    assert any("shows width 4 but reference-exact fixes the width at q=3" in p for p in found.contradictions)


SUMMARIES_400 = re.findall(r"\[ds4-spec\] (gen=\S+ steps=\S+ mean_accept=\S+ q_cap=(\d) full_snap=1)",
                           (FORK / "direct-probe-400-tokens.txt").read_text(encoding="utf-8"))


def test_the_real_400_token_summaries_fix_matched_only_where_the_loops_arithmetic_does() -> None:
    """Over 100 steps two decimals no longer fix matched; gen <= matched + steps <= gen + q - 1 sometimes does."""
    assert len(SUMMARIES_400) == 18
    derived = {}
    for body, q in SUMMARIES_400:
        found = counters.derive(parse_summary(body), int(q), [], [])
        assert found.contradictions == () and found.offered == parse_summary(body).steps * (int(q) - 1), body
        derived[body.split(" mean")[0] + f" q={q}"] = found.matched
    # steps=398: the means allow 0..1 and gen=399 needs at least 1; steps=395 and 399 stay open
    assert derived == {
        **{f"gen=399 steps=395 q={q}": None for q in "234"},
        **{f"gen=399 steps=399 q={q}": None for q in "234"},
        **{f"gen=399 steps=398 q={q}": 1 for q in "234"},
    }
    first = counters.derive(parse_summary("gen=399 steps=395 mean_accept=0.01/1.00 q_cap=2 full_snap=1"), 2, [], [])
    assert "allow matched = 4..5" in first.allowed  # the means alone allow 2..5; gen <= m + steps <= gen + 1
    assert (first.matched, first.matched_min, first.matched_max, first.source) == (None, 4, 5, counters.DERIVED)


def test_steps_below_100_fix_matched_from_the_means_alone() -> None:
    for steps in range(1, 100):
        for matched in range(0, steps * 3 + 1):
            mean = f"{matched / steps:.2f}/3.00"
            gen = matched + steps  # no cut-short last step
            summary = parse_summary(f"gen={gen} steps={steps} mean_accept={mean} q_cap=4 full_snap=1")
            found = counters.derive(summary, 4, [], [])
            assert (found.matched, found.offered) == (matched, steps * 3), (steps, matched)


def test_a_complete_token_trace_fixes_matched_where_the_means_do_not() -> None:
    # 395 steps at q=2: four steps accept their draft (two tokens each), the rest emit their bonus only
    tokens: list[TokenLine] = []
    for step in range(395):
        slots = 2 if step < 4 else 1
        for slot in range(1, slots + 1):
            tokens.append(TokenLine(len(tokens), step, slot, 700 + slot, slot == slots))
    summary = parse_summary("gen=399 steps=395 mean_accept=0.01/1.00 q_cap=2 full_snap=1")
    found = counters.derive(summary, 2, [], [], tokens)
    assert (found.matched, found.offered, found.source) == (4, 395, counters.DERIVED)


def test_token_trace_lines_parse_and_their_gaps_are_named() -> None:
    record = classify("[ds4-spec-token] out=3 step=2 slot=1 token=772 bonus")
    assert record is not None and record.kind == TOKEN and record.token == TokenLine(3, 2, 1, 772, True)
    assert parse_token("out=0 step=0 slot=2 token=5") == TokenLine(0, 0, 2, 5, False)
    steps, problems = counters.token_steps([TokenLine(0, 0, 1, 5, True), TokenLine(2, 1, 1, 6, True)], 2)
    assert [s.source for s in steps] == [TOKEN_TRACE, TOKEN_TRACE]
    assert problems == ["the per-token trace's out= values are not 0, 1, 2, ... in order (found [0, 2])"]
    _, problems = counters.token_steps([TokenLine(0, 0, 1, 5, False), TokenLine(1, 1, 1, 6, True)], 2)
    assert problems == ["step 0 of the per-token trace has no bonus token, and only the last step can be cut short"]


def test_a_printed_counter_that_the_steps_contradict_fails() -> None:
    lines = _probe_lines(2)
    summary = parse_summary("gen=95 steps=95 matched=95 offered=95 mean_accept=1.00/1.00 q_cap=2 full_snap=1")
    found = counters.derive(summary, 2, [parse(line) for line in lines], lines)
    assert found.source == counters.PRINTED
    assert found.contradictions == ("the summary's matched=95 contradicts the per-step lines, which allow 0..87",)


def test_summary_variants_are_told_apart() -> None:
    bodies = {
        "gen=9 steps=4 mean_accept=1.25/3.00 q_cap=4 full_snap=1 sampling=0 sample=0.00 ms/step": "sampling",
        "gen=9 steps=4 mean_accept=1.25/3.00 q_cap=4 verify=exact-prefix full_snap=0": "verify-mode",
        "gen=9 steps=4 mean_accept=1.25/3.00 q_cap=4 full_snap=1": "plain",
        "gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=4 full_snap=1": "countered",
    }
    for body, variant in bodies.items():
        assert parse_summary(body).variant == variant
    record = classify("[ds4-spec] gen=9 steps=4 q_cap=4 full_snap=1")
    assert record is not None and record.kind == MALFORMED and "must print mean_accept" in record.reason


def test_a_requests_steps_are_available_from_its_log_record(tmp_path: Path) -> None:
    """The per-request SpecStep tuple proof coverage reads: the real compare and timing lines, then the tokens."""
    from ds4ci.judging.attribution import attribute
    from ds4ci.judging.protocol import scan_log

    log = tmp_path / "stderr.log"
    tokens = ["[ds4-spec-token] out=0 step=0 slot=1 token=772 bonus", "[ds4-spec-token] out=1 step=1 slot=1 token=772 bonus"]
    summary = "[ds4-spec] gen=95 steps=95 mean_accept=0.00/1.00 q_cap=2 full_snap=1"
    log.write_text("\n".join([*_probe_lines(2), *tokens, summary]) + "\n")
    (request,) = attribute([scan_log(log, "stderr", 100)], 1, speculative=True, traces=False).requests
    steps = counters.request_steps(request, 2)
    assert [s.source for s in steps] == [COMPARE, TIMING] * 4 + [COMPARE] * 4 + [TOKEN_TRACE] * 2
    assert len(request.step_lines) == len(request.steps) == 12 and request.tokens[1].out == 1
