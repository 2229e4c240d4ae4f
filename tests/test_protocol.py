"""The log parser: exact formats, edge cases, and a fuzz that only our error type may escape."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ds4ci.errors import Ds4ciError
from ds4ci.protocol import first_mismatch, parse_request_log, parse_summary, parse_trace

TRACE = "[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=3 ids=[5 6 7]"
BANNER = "[ds4-spec] reference-exact verifier: sequential target verification, full rollback snapshots"
SUMMARY = "[ds4-spec] gen=96 steps=49 matched=46 offered=49 mean_accept=46/49 q_cap=2 full_snap=1"


def test_parses_the_three_trusted_line_families_and_ignores_the_rest() -> None:
    log = parse_request_log([
        "llama: loading model",
        TRACE,
        "[ds4-spec-t] verify_ms=1.2 gen=3 steps=1 matched=0 offered=1 mean_accept=0/1 q_cap=2 full_snap=1",
        BANNER,
        SUMMARY,
        "",
    ])
    assert log.problems == ()
    assert log.banners == 1
    assert [t.ids for t in log.traces] == [(5, 6, 7)]
    assert (log.traces[0].reference_exact, log.traces[0].speculation, log.traces[0].n) == (1, 1, 3)
    (summary,) = log.summaries
    assert (summary.gen, summary.steps, summary.matched, summary.offered, summary.q_cap, summary.full_snap) == (
        96, 49, 46, 49, 2, 1,
    )
    assert summary.mean_accept == "46/49"


def test_summary_with_extra_trailing_fields_still_parses() -> None:
    summary = parse_summary("gen=96 steps=35 matched=60 offered=70 mean_accept=60/70 q_cap=3 full_snap=1 sampling=greedy")
    assert summary.extra == (("sampling", "greedy"),)
    assert summary.matched == 60


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[ds4-spec] gen=96 steps=49 mean_accept=46/49 q_cap=2 full_snap=1", "matched, offered"),
        ("[ds4-spec] gen=96 steps=49 matched=46.0 offered=49 mean_accept=46/49 q_cap=2 full_snap=1", "matched"),
        ("[ds4-spec] gen=96 steps=49 matched=46 offered=x mean_accept=46/49 q_cap=2 full_snap=1", "offered"),
        ("[ds4-spec] gen=96 steps=49 matched=46 offered=49 mean_accept=0.9 q_cap=2 full_snap=1", "mean_accept"),
        ("[ds4-spec] gen=96 steps=49 matched=46 offered=49 mean_accept=46/49 q_cap=2 full_snap=2", "full_snap"),
        ("[ds4-spec] gen=96 steps=49 matched=46 matched=46 offered=49 mean_accept=46/49 q_cap=2 full_snap=1", "twice"),
        ("[ds4-spec] gen=96 matched=46 steps=49 offered=49 mean_accept=46/49 q_cap=2 full_snap=1", "order"),
        ("[ds4-spec] step=49 matched=46", "start with gen="),
    ],
)
def test_malformed_summary_is_a_problem_never_a_skip(line: str, expected: str) -> None:
    log = parse_request_log([line])
    assert log.summaries == ()
    assert len(log.problems) == 1
    assert expected in log.problems[0]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=3", "expected"),
        ("[ds4-exact-verify-trace] reference_exact=2 speculation=1 n=1 ids=[1]", "0 or 1"),
        ("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=2 ids=[1 -2]", "non-negative"),
        ("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=2 ids=[1 2.5]", "non-negative"),
        ("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=2 ids=[1  2]", "single spaces"),
        ("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=2 ids=[1,2]", "non-negative"),
    ],
)
def test_malformed_trace_is_a_problem(line: str, expected: str) -> None:
    log = parse_request_log([line])
    assert log.traces == ()
    assert expected in log.problems[0]


def test_empty_trace_and_count_mismatch_are_parsed_for_the_verdict_to_judge() -> None:
    empty = parse_trace(" reference_exact=0 speculation=0 n=0 ids=[]")
    assert (empty.n, empty.ids) == (0, ())
    off = parse_trace(" reference_exact=0 speculation=0 n=4 ids=[1 2 3]")
    assert off.n == 4 and len(off.ids) == 3


def test_duplicate_traces_are_all_kept() -> None:
    log = parse_request_log([TRACE, TRACE])
    assert len(log.traces) == 2


def test_first_mismatch_reports_position_and_window() -> None:
    target = list(range(100, 120))
    spec = list(target)
    spec[10] = 7
    found = first_mismatch(target, spec, context=2)
    assert found is not None
    assert found.position == 10 and found.window_start == 8
    assert found.target_ids == (108, 109, 110, 111, 112)
    assert found.spec_ids == (108, 109, 7, 111, 112)
    assert "position 10" in found.describe()


def test_first_mismatch_at_token_zero_and_on_length() -> None:
    zero = first_mismatch([1, 2, 3], [9, 2, 3])
    assert zero is not None and zero.position == 0 and zero.window_start == 0
    shorter = first_mismatch([1, 2, 3], [1, 2])
    assert shorter is not None and shorter.position == 2 and (shorter.target_len, shorter.spec_len) == (3, 2)
    assert first_mismatch([1, 2, 3], [1, 2, 3]) is None


_fragments = st.sampled_from([
    "[ds4-exact-verify-trace] ", "[ds4-spec] ", "[ds4-spec] gen=", "reference-exact verifier:", "reference_exact=",
    "speculation=", "n=", "ids=[", "]", " ", "=", "1", "0", "-1", "99999999999999999999", "steps=", "matched=",
    "offered=", "mean_accept=", "/", "q_cap=", "full_snap=", "\t", "\r", "\x00", "é", "[ds4-spec-t] ",
])
_lines = st.lists(_fragments, max_size=30).map("".join) | st.text(max_size=200)


@settings(max_examples=int(os.environ.get("DS4CI_FUZZ_EXAMPLES", "400")), deadline=None)
@given(st.lists(_lines, max_size=20))
def test_fuzz_parser_never_crashes(lines: list[str]) -> None:
    try:
        log = parse_request_log(lines)
    except Ds4ciError:
        return
    for trace in log.traces:
        assert all(i >= 0 for i in trace.ids)
        assert trace.reference_exact in (0, 1) and trace.speculation in (0, 1)
    for summary in log.summaries:
        assert summary.full_snap in (0, 1)
    recognised = sum(
        1 for line in lines
        if line.startswith("[ds4-exact-verify-trace]") or (line.startswith("[ds4-spec] gen=") and "=" in line)
    )
    assert len(log.traces) + len(log.summaries) + len(log.problems) >= recognised


def test_a_flood_of_trusted_lines_stays_bounded_and_is_a_problem() -> None:
    log = parse_request_log([TRACE] * 10_000)
    assert len(log.traces) == 64
    assert any("more than 64" in p for p in log.problems)
    assert len(log.problems) == 1
