"""The verdict rules of ds4ci/judging/verdict.py, in process, on the real server's line formats.

Records come from tests/data/real-server/upstream-gate-lines.txt (lines the upstream gate's own
tests use) parsed by ds4ci/judging/protocol.py, so a rule is tested on what the server prints.
The clauses named below are those of docs/protocol.md.
"""

from __future__ import annotations

import hashlib

import pytest
from paths import TESTS

from ds4ci.judging.oracle import Observed, check_trace
from ds4ci.judging.protocol import RequestLog as Log
from ds4ci.judging.protocol import SpecSummary, Trace, classify, parse_trace
from ds4ci.judging.verdict import (
    ERROR,
    FAIL,
    NOT_RUN,
    PASS,
    TargetReference,
    check_spec_request,
    check_target_only_request,
    ids_digest,
    judge_target_only,
    judge_width_prompt,
    worst,
)
from ds4ci.records import PromptResult

LINES = TESTS / "data" / "real-server" / "upstream-gate-lines.txt"
Q = 4  # the q_cap of the real summary lines


def _line(label: str) -> str:
    for row in LINES.read_text(encoding="utf-8").splitlines():
        if not row.startswith("#") and row.partition("\t")[0] == label:
            return row.partition("\t")[2]
    raise AssertionError(f"{LINES}: no line labelled {label!r}")


def trace(label: str) -> Trace:
    record = classify(_line(label))
    assert record is not None and record.trace is not None, record
    return record.trace


def summary(label: str) -> SpecSummary:
    record = classify(_line(label))
    assert record is not None and record.summary is not None, record
    return record.summary


SPEC_TRACE = trace("PASS-TRACE")  # reference_exact=1 speculation=1 ids=[8 13 21]
# The target-only arm prints the same trace format with both flags 0.
TARGET_TRACE = parse_trace(f"reference_exact=0 speculation=0 n=3 ids=[{' '.join(map(str, SPEC_TRACE.ids))}]")
GOOD_SUMMARY = summary("PASS-SUMMARY")  # matched=5 offered=12 q_cap=4 full_snap=1


def log(traces: tuple[Trace, ...] = (), summaries: tuple[SpecSummary, ...] = (), problems: tuple[str, ...] = ()) -> Log:
    return Log(traces=traces, banners=0, summaries=summaries, problems=problems)


def spec(repeat: int = 0, tr: Trace = SPEC_TRACE, sm: SpecSummary = GOOD_SUMMARY, prompt: int = 0) -> Observed:
    return Observed(prompt, repeat, log((tr,), (sm,)))


def reference(ids: tuple[int, ...] = SPEC_TRACE.ids) -> TargetReference:
    return TargetReference({0: ids}, PASS, [], True)


def cell(observed: list[Observed], ref: TargetReference | None = None, banner: bool = True) -> PromptResult:
    return judge_width_prompt(Q, 0, "a" * 64, observed, ref or reference(), banner)


def with_ids(ids: list[int]) -> Trace:
    return parse_trace(f"reference_exact=1 speculation=1 n={len(ids)} ids=[{' '.join(map(str, ids))}]")


# -- clause 2: one well-formed trace per request, flags matching the arm ---------------------------------------


def test_a_well_formed_trace_of_the_right_arm_passes() -> None:
    found = check_trace(Observed(0, 0, log((SPEC_TRACE,))), "here", 1, 1)
    assert found.reasons == [] and found.trace == SPEC_TRACE


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("FAIL-TRACE declared 3, contains 2", "here: trace declares n=3 but lists 2 IDs"),
        ("FAIL-TRACE exact run without speculation", "here: trace flags reference_exact=1 speculation=0"),
    ],
)
def test_a_trace_the_upstream_gate_fails_fails_here(label: str, expected: str) -> None:
    found = check_trace(Observed(0, 0, log((trace(label),))), "here", 1, 1)
    assert any(r.startswith(expected) for r in found.reasons), found.reasons


def test_an_empty_trace_fails() -> None:
    found = check_trace(Observed(0, 0, log((trace("FAIL-TRACE empty"),))), "here", 0, 0)
    assert found.reasons == ["here: trace is empty (no token IDs)"]


@pytest.mark.parametrize("count", [0, 2])
def test_a_missing_or_duplicated_trace_line_fails(count: int) -> None:
    found = check_trace(Observed(0, 0, log((SPEC_TRACE,) * count)), "here", 1, 1)
    assert f"here: expected exactly one [ds4-exact-verify-trace] line, found {count}" in found.reasons
    assert (found.trace is not None) == (count > 0)  # a duplicate is still judged


def test_an_unattributable_request_defers_to_the_server_wide_problems() -> None:
    found = check_trace(Observed(0, 0, log(problems=("log out of order",)), attributed=False), "here", 1, 1)
    assert found.reasons == ["here: log out of order"]


def test_the_target_only_arm_expects_both_flags_off() -> None:
    assert check_target_only_request(Observed(2, 1, log((TARGET_TRACE,)))).reasons == []
    wrong = check_target_only_request(Observed(2, 1, log((SPEC_TRACE,)))).reasons
    assert wrong and wrong[0].startswith("target-only prompt 2 request 2: trace flags reference_exact=1 speculation=1")


# -- clauses 4 and 5: speculation ran, was rejected at least once, rolled back fully ------------------------------


def test_a_real_passing_summary_passes() -> None:
    found = check_spec_request(spec(), Q)
    assert found.reasons == [] and found.summary == GOOD_SUMMARY


def test_speculation_that_never_ran_fails() -> None:
    reasons = check_spec_request(spec(sm=summary("FAIL-SUMMARY no work")), Q).reasons
    assert "q=4 prompt 0 request 1: steps=0; speculation did not run (expected steps > 0)" in reasons
    assert "q=4 prompt 0 request 1: offered=0; no drafts were offered (expected > 0)" in reasons


def test_no_rejection_fails_because_rollback_was_never_exercised() -> None:
    reasons = check_spec_request(spec(sm=summary("FAIL-SUMMARY all accepted")), Q).reasons
    assert len(reasons) == 1 and "no rejection observed (matched=12 == offered=12)" in reasons[0]


def test_partial_rollback_snapshots_fail() -> None:
    reasons = check_spec_request(spec(sm=summary("FAIL-SUMMARY no full snapshots")), Q).reasons
    assert reasons == ["q=4 prompt 0 request 1: full_snap=0, expected full_snap=1 (full rollback snapshots)"]


def test_a_width_other_than_the_servers_fails() -> None:
    assert check_spec_request(spec(), 3).reasons[-1] == (
        "q=3 prompt 0 request 1: q_cap=4 but the server was started with width q=3"
    )


@pytest.mark.parametrize("count", [0, 2])
def test_a_missing_or_duplicated_summary_line_fails(count: int) -> None:
    found = check_spec_request(Observed(0, 0, log((SPEC_TRACE,), (GOOD_SUMMARY,) * count)), Q)
    assert found.reasons == [f"q=4 prompt 0 request 1: expected exactly one [ds4-spec] gen=... summary line, found {count}"]


# -- the target-only oracle ---------------------------------------------------------------------------------------


def test_identical_target_only_repeats_give_the_reference() -> None:
    got = judge_target_only([Observed(0, r, log((TARGET_TRACE,))) for r in range(2)], 1)
    assert (got.verdict, got.deterministic, got.reasons, got.ids) == (PASS, True, [], {0: SPEC_TRACE.ids})


def test_non_deterministic_target_only_decoding_is_an_error_without_a_reference() -> None:
    other = parse_trace("reference_exact=0 speculation=0 n=3 ids=[8 14 21]")
    got = judge_target_only([Observed(0, 0, log((TARGET_TRACE,))), Observed(0, 1, log((other,)))], 1)
    assert (got.verdict, got.deterministic, got.ids) == (ERROR, False, {})
    assert "prompt 0, request 2 differs from request 1: first differing position 1" in got.reasons[0]


def test_a_target_only_request_without_its_trace_fails_and_gives_no_reference() -> None:
    got = judge_target_only([Observed(0, 0, log((TARGET_TRACE,))), Observed(0, 1, log())], 1)
    assert (got.verdict, got.ids) == (FAIL, {})
    assert got.reasons == ["target-only prompt 0 request 2: expected exactly one [ds4-exact-verify-trace] line, found 0"]


def test_server_wide_target_only_problems_fail() -> None:
    got = judge_target_only([Observed(0, 0, log((TARGET_TRACE,)))], 1, ["speculation ran"])
    assert (got.verdict, got.reasons, got.ids) == (FAIL, ["target-only: speculation ran"], {0: SPEC_TRACE.ids})


# -- one width x prompt cell --------------------------------------------------------------------------------------


def test_identical_ids_pass() -> None:
    got = cell([spec(0), spec(1)])
    assert got["verdict"] == PASS and got["reasons"] == []
    assert (got["requests"], got["parity_requests"], got["mismatch"]) == (2, 2, None)
    assert (got["rejection_observed"], got["repeats_identical"], got["counters_identical"]) == (True, True, True)
    assert (got["tokens_target"], got["tokens_spec"], got["matched"], got["offered"]) == (3, 3, 5, 12)


def test_one_differing_token_fails_naming_the_first_differing_position() -> None:
    got = cell([spec(0, with_ids([8, 14, 21]))])
    assert got["verdict"] == FAIL and got["parity_requests"] == 0
    assert got["reasons"] == [
        "q=4 prompt 0 request 1: token IDs differ: first differing position 1 (target-only has 3 IDs, "
        "reference-exact 3); IDs from position 0: target-only [8, 13, 21] vs reference-exact [8, 14, 21]"
    ]
    assert got["mismatch"] == {
        "position": 1, "window_start": 0, "target_ids": [8, 13, 21], "spec_ids": [8, 14, 21],
        "target_len": 3, "spec_len": 3,
    }


def test_requests_that_differ_alike_are_reported_once() -> None:
    differing = with_ids([8, 13])
    reasons = cell([spec(0, differing), spec(1, differing)])["reasons"]
    assert len(reasons) == 1
    assert reasons[0].startswith("q=4 prompt 0 requests 1, 2: token IDs differ: first differing position 2")


def test_the_recorded_mismatch_is_the_first_requests() -> None:
    got = cell([spec(0, with_ids([8, 13, 22])), spec(1, with_ids([9, 13, 21]))])
    assert got["mismatch"] is not None and got["mismatch"]["position"] == 2
    assert len(got["reasons"]) == 3  # each request's difference, then that the repeats disagree


def test_speculation_that_never_ran_fails_the_cell() -> None:
    got = cell([spec(sm=summary("FAIL-SUMMARY no work"))])
    assert got["verdict"] == FAIL and got["parity_requests"] == 1  # the tokens agree; the proof is missing
    assert any("no drafts were offered" in r for r in got["reasons"])
    assert got["rejection_observed"] is False


def test_no_rejection_anywhere_makes_the_cell_an_error_never_a_fail() -> None:
    got = cell([spec(r, sm=summary("FAIL-SUMMARY all accepted")) for r in range(2)])
    assert got["verdict"] == ERROR and got["rejection_observed"] is False
    assert any("rollback was never exercised" in r for r in got["reasons"])


def test_a_missing_trace_fails_the_cell() -> None:
    got = cell([spec(0), Observed(0, 1, log((), (GOOD_SUMMARY,)))])
    assert got["verdict"] == FAIL and got["repeats_identical"] is False
    assert "q=4 prompt 0 request 2: expected exactly one [ds4-exact-verify-trace] line, found 0" in got["reasons"]


def test_repeats_that_disagree_fail() -> None:
    other = SpecSummary(gen=9, steps=4, matched=6, offered=12, mean_accept=None, q_cap=4, full_snap=1)
    got = cell([spec(0), spec(1, sm=other)])
    assert got["verdict"] == FAIL and got["counters_identical"] is False
    assert got["reasons"] == ["q=4 prompt 0: repeated requests on one server gave different speculation counters"]


def test_a_missing_banner_fails() -> None:
    got = cell([spec()], banner=False)
    assert got["verdict"] == FAIL and got["banner_claimed"] is False
    assert got["reasons"] == [
        "q=4: the reference-exact activation banner '[ds4-spec] reference-exact verifier:' is missing"
    ]


def test_no_recorded_request_fails() -> None:
    got = cell([spec(prompt=1)])
    assert got["verdict"] == FAIL and got["requests"] == 0
    assert "q=4 prompt 0: no reference-exact request was recorded" in got["reasons"]


@pytest.mark.parametrize(
    ("ref", "verdict"),
    [
        (TargetReference({}, FAIL, ["a target-only trace was missing"], True), FAIL),
        (TargetReference({}, ERROR, ["not deterministic"], False), ERROR),
    ],
)
def test_without_a_target_only_reference_the_cell_cannot_pass(ref: TargetReference, verdict: str) -> None:
    got = cell([spec()], ref)
    assert got["verdict"] == verdict and got["parity_requests"] == 0 and got["tokens_target"] is None
    assert got["reasons"] == ["q=4 prompt 0: no usable target-only reference for this prompt"]


# -- aggregation helpers ------------------------------------------------------------------------------------------


def test_worst_ranks_fail_over_error_over_not_run_over_pass() -> None:
    assert worst([PASS, NOT_RUN, ERROR, FAIL]) == FAIL
    assert worst([PASS, NOT_RUN, ERROR]) == ERROR
    assert worst([PASS, NOT_RUN]) == NOT_RUN
    assert worst([PASS, PASS]) == PASS
    assert worst([]) == PASS


def test_ids_digest_is_the_sha256_of_the_space_separated_ids() -> None:
    assert ids_digest([8, 13, 21]) == hashlib.sha256(b"8 13 21").hexdigest()
    assert ids_digest([1, 23]) != ids_digest([12, 3])
