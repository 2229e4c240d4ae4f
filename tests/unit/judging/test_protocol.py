"""The log parser: the real server's exact lines, the summary rule, streaming, and fuzzing."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import TESTS

from ds4ci.judging.protocol import (
    BANNER,
    FAILURE,
    FAILURE_MESSAGES,
    MALFORMED,
    MAX_LINE_BYTES,
    SUMMARY,
    TRACE,
    classify,
    first_mismatch,
    parse_summary,
    parse_trace,
    scan_log,
)

UPSTREAM = TESTS / "data" / "real-server" / "upstream-gate-lines.txt"


def upstream_lines() -> list[tuple[str, str]]:
    """(what the upstream gate decides, line) for every line its own unit tests feed its parser."""
    rows = []
    for raw in UPSTREAM.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        decision, line = raw.split("\t", 1)
        rows.append((decision, line))
    return rows


def test_the_upstream_fixture_is_complete() -> None:
    decisions = [d.split(" ", 1)[0] for d, _ in upstream_lines()]
    assert decisions.count("PASS-TRACE") == 1 and decisions.count("PASS-SUMMARY") == 1
    assert decisions.count("FAIL-TRACE") == 3 and decisions.count("FAIL-SUMMARY") == 4
    assert decisions.count("BANNER") == 1


@pytest.mark.parametrize(("decision", "line"), upstream_lines(), ids=[d for d, _ in upstream_lines()])
def test_upstream_gate_lines_parse_as_the_upstream_gate_decides(decision: str, line: str) -> None:
    """Every line of the upstream gate's tests: PASS lines parse; FAIL lines parse to what fails (or fail)."""
    record = classify(line)
    assert record is not None
    kind = decision.split(" ", 1)[0]
    if kind == "BANNER":
        assert record.kind == BANNER
    elif kind == "PASS-TRACE":
        assert record.kind == TRACE and record.trace is not None
        assert record.trace.ids == (8, 13, 21) and record.trace.n == 3
    elif kind == "PASS-SUMMARY":
        assert record.kind == SUMMARY and record.summary is not None
        s = record.summary
        assert (s.gen, s.steps, s.matched, s.offered, s.q_cap, s.full_snap) == (9, 4, 5, 12, 4, 1)
        assert s.mean_accept == "1.25/3.00"  # decimals, as the real server prints them
    elif decision == "FAIL-SUMMARY no counters":
        # the counterless dialect: it parses, and the verdict decides (without a trace it fails for the reason named)
        assert record.kind == SUMMARY and record.summary is not None
        assert (record.summary.matched, record.summary.offered, record.summary.variant) == (None, None, "plain")
    else:
        # The other FAIL lines are well-formed: the verdict (tests/test_verdict.py) rejects them.
        assert record.kind in (TRACE, SUMMARY), record


def test_the_real_servers_head_summary_format_is_the_counterless_one() -> None:
    """printf of the public source: gen=%d steps=%ld mean_accept=%.2f/%.2f q_cap=%d full_snap=%d."""
    line = "[ds4-spec] gen=95 steps=49 mean_accept=0.94/1.00 q_cap=2 full_snap=1"
    record = classify(line)
    assert record is not None and record.kind == SUMMARY and record.summary is not None
    s = record.summary
    assert (s.gen, s.steps, s.matched, s.offered, s.mean_accept, s.q_cap, s.full_snap) == (95, 49, None, None, "0.94/1.00", 2, 1)
    assert record.family == "summary-plain"


@pytest.mark.parametrize(
    "line",
    [
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3 q_cap=4 full_snap=1",  # older %.2f/%d
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1/3 q_cap=4 full_snap=1",
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 q_cap=4 full_snap=1",  # mean_accept is optional
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=4 verify=seq full_snap=1",
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=4 full_snap=1 sampling=0 sample=0.12 ms/step",
        "[ds4-spec] gen=9 matched=5 steps=4 offered=12 q_cap=4 full_snap=1",  # required keys by name, any order
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=0.00/0.00 q_cap=4 full_snap=1\r",
    ],
)
def test_summary_variants_of_real_builds_parse(line: str) -> None:
    record = classify(line)
    assert record is not None and record.kind == SUMMARY, record
    assert record.summary is not None and record.summary.counters() == (9, 4, 5, 12, 4, 1)


def test_extras_and_tail_text_are_kept() -> None:
    s = parse_summary("gen=9 steps=4 matched=5 offered=12 verify=seq mean_accept=1.25/3.00 q_cap=4 full_snap=1 "
                      "sampling=0 sample=0.12 ms/step")
    assert s.extra == (("verify", "seq"), ("sampling", "0"), ("sample", "0.12"))
    assert s.tail == "ms/step"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[ds4-spec] gen=9 steps=4 offered=12 q_cap=4 full_snap=1", "missing: matched"),
        ("[ds4-spec] gen=9 steps=4 matched=5.0 offered=12 q_cap=4 full_snap=1", "matched must be a non-negative integer"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=x q_cap=4 full_snap=1", "offered"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=0.9 q_cap=4 full_snap=1", "mean_accept"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/ q_cap=4 full_snap=1", "mean_accept"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=12 q_cap=4 full_snap=2", "full_snap"),
        ("[ds4-spec] gen=9 steps=4 matched=5 matched=5 offered=12 q_cap=4 full_snap=1", "more than once"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1/3 mean_accept=1/3 q_cap=4 full_snap=1",
         "more than once"),
        ("[ds4-spec] gen=9 steps=4 matched=5 offered=12 q_cap=4 full_snap=", "full_snap"),
        ("[ds4-spec] gen=9 steps=-4 matched=5 offered=12 q_cap=4 full_snap=1", "steps"),
    ],
)
def test_malformed_summary_is_a_failure_never_a_skip(line: str, expected: str) -> None:
    record = classify(line)
    assert record is not None and record.kind == MALFORMED
    assert expected in record.reason


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
def test_malformed_trace_is_a_failure(line: str, expected: str) -> None:
    record = classify(line)
    assert record is not None and record.kind == MALFORMED
    assert expected in record.reason


@pytest.mark.parametrize("message", FAILURE_MESSAGES)
def test_every_failure_line_is_recognised(message: str) -> None:
    record = classify(f"[ds4-spec] {message}")
    assert record is not None and record.kind == FAILURE and message in record.text


@pytest.mark.parametrize(
    "line",
    [
        "[ds4-spec-t] TOTAL 812.1 ms, 49 steps (16.6 ms/step), 96 tok (118.2 tok/s)",
        "[ds4-spec] adaptive width policy=confidence",
        "[ds4-spec] hidden nnan=0/4096 rms=1.0000 ctx_len=12",
        "[ds4-spec] dbg ds_ok=1 q=2 lt=5 draft=[1 2 3 4]",
        "[ds4-spec] sequential verify supports q<=4; capping requested q=5 to 4",
        "[server] max_tokens=20000 clamped to default_max_tokens=16000",
        "llama: loading model",
        "",
    ],
)
def test_other_lines_are_ignored(line: str) -> None:
    assert classify(line) is None


def test_empty_trace_and_count_mismatch_are_parsed_for_the_verdict_to_judge() -> None:
    empty = parse_trace(" reference_exact=0 speculation=0 n=0 ids=[]")
    assert (empty.n, empty.ids) == (0, ())
    off = parse_trace(" reference_exact=0 speculation=0 n=4 ids=[1 2 3]")
    assert off.n == 4 and len(off.ids) == 3


def test_scan_reads_records_in_order_with_offsets(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    lines = [
        "loading\n",
        "[ds4-spec] reference-exact verifier: sequential target replay with full rollback snapshots\n",
        "[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=4 full_snap=1\n",
        "[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=3 ids=[8 13 21]",  # no final newline
    ]
    path.write_text("".join(lines))
    scan = scan_log(path, "stderr", 10)
    assert [r.kind for r in scan.records] == [BANNER, SUMMARY, TRACE]
    assert [r.offset for r in scan.records] == [len(lines[0]), len(lines[0]) + len(lines[1]), sum(map(len, lines[:3]))]
    assert scan.size == path.stat().st_size and scan.dropped == 0


def test_scan_keeps_at_most_max_records_and_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    path.write_text("[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=1 ids=[1]\n" * 1000)
    scan = scan_log(path, "stderr", 64)
    assert len(scan.records) == 64 and scan.dropped == 936


def test_a_huge_line_without_newline_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    with path.open("wb") as fh:
        fh.write(b"[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=1 ids=[1]\n")
        fh.write(b"[ds4-exact-verify-trace] " + b"7" * (MAX_LINE_BYTES + 10))
    scan = scan_log(path, "stdout", 10)
    assert [r.kind for r in scan.records] == [TRACE, MALFORMED]
    assert "longer than" in scan.records[1].reason


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


# -- properties of the summary rule -------------------------------------------------------------
REQUIRED = {"gen": 9, "steps": 4, "matched": 5, "offered": 12, "q_cap": 4, "full_snap": 1}
_key = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True).filter(lambda k: k not in REQUIRED and k != "mean_accept")
_extra = st.tuples(_key, st.from_regex(r"[A-Za-z0-9.:/_-]{0,8}", fullmatch=True)).map(lambda kv: f"{kv[0]}={kv[1]}")
_tail_word = st.from_regex(r"[A-Za-z0-9./%()-]{1,10}", fullmatch=True).filter(lambda w: "=" not in w)
_examples = int(os.environ.get("DS4CI_FUZZ_EXAMPLES", "300"))


def _summary(order: list[str], extras: list[str], tail: list[str]) -> str:
    fields = [f"{k}={REQUIRED[k]}" for k in order]
    return " ".join(["[ds4-spec]", f"gen={REQUIRED['gen']}", *fields, "mean_accept=1.25/3.00", *extras, *tail])


_order = st.permutations([k for k in REQUIRED if k != "gen"])


@settings(max_examples=_examples, deadline=None)
@given(_order, st.lists(_extra, max_size=6), st.lists(_tail_word, max_size=4))
def test_extra_fields_and_tail_text_never_break_a_valid_line(order: list[str], extras: list[str], tail: list[str]) -> None:
    record = classify(_summary(order, extras, tail))
    assert record is not None and record.kind == SUMMARY, record
    assert record.summary is not None and record.summary.counters() == (9, 4, 5, 12, 4, 1)


@settings(max_examples=_examples, deadline=None)
@given(_order, st.lists(_extra, max_size=4), st.sampled_from(sorted(k for k in REQUIRED if k != "gen")),
       st.booleans())
def test_a_missing_or_duplicated_required_field_always_fails(
    order: list[str], extras: list[str], victim: str, duplicate: bool
) -> None:
    line = _summary(order, extras, [])
    if duplicate:
        line += f" {victim}={REQUIRED[victim]}"
    else:
        line = re.sub(rf" {victim}=\S+", "", line)
    record = classify(line)
    assert record is not None and record.kind == MALFORMED, line


_fragments = st.sampled_from([
    "[ds4-exact-verify-trace] ", "[ds4-spec] ", "[ds4-spec] gen=", "reference-exact verifier:", "reference_exact=",
    "speculation=", "n=", "ids=[", "]", " ", "=", "1", "0", "-1", "99999999999999999999", "steps=", "matched=",
    "offered=", "mean_accept=", "/", ".", "q_cap=", "full_snap=", "\t", "\r", "\x00", "é", "[ds4-spec-t] ",
    "snapshot failed", "verify failed",
])
_lines = st.lists(_fragments, max_size=30).map("".join) | st.text(max_size=200)


@settings(max_examples=int(os.environ.get("DS4CI_FUZZ_EXAMPLES", "400")), deadline=None)
@given(st.lists(_lines, max_size=20))
def test_fuzz_classify_never_crashes_and_never_skips_a_trusted_line(lines: list[str]) -> None:
    for line in lines:
        record = classify(line)
        trusted = line.startswith(("[ds4-exact-verify-trace]", "[ds4-spec] gen=", "[ds4-spec] reference-exact verifier:"))
        assert (record is not None) >= trusted
        if record is not None and record.trace is not None:
            assert all(i >= 0 for i in record.trace.ids)
            assert record.trace.reference_exact in (0, 1) and record.trace.speculation in (0, 1)
        if record is not None and record.summary is not None:
            assert record.summary.full_snap in (0, 1)
