"""Attribution by order over a whole server log, and the verdict on every upstream example line."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_protocol import upstream_lines

from ds4ci.judging.attribution import attribute
from ds4ci.judging.oracle import Observed
from ds4ci.judging.protocol import LogScan, scan_log
from ds4ci.judging.verdict import check_spec_request, check_target_only_request

BANNER = next(line for d, line in upstream_lines() if d == "BANNER")
PASS_TRACE = next(line for d, line in upstream_lines() if d == "PASS-TRACE")
PASS_SUMMARY = next(line for d, line in upstream_lines() if d == "PASS-SUMMARY")
TARGET_TRACE = "[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=3 ids=[8 13 21]"


def scans(tmp_path: Path, stderr: list[str], stdout: list[str] = ()) -> list[LogScan]:  # type: ignore[assignment]
    out = []
    for name, lines in (("stderr", stderr), ("stdout", stdout)):
        path = tmp_path / f"{name}.log"
        path.write_text("".join(f"{line}\n" for line in lines))
        out.append(scan_log(path, name, 100))
    return out


def test_upstream_pass_lines_pass_for_every_request(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, [BANNER, PASS_SUMMARY, PASS_TRACE] * 3), 3, speculative=True)
    assert log.problems == () and log.banners == 3
    for k, request in enumerate(log.requests):
        check = check_spec_request(Observed(0, k, request), q=4)
        assert check.reasons == [], check.reasons


@pytest.mark.parametrize(("decision", "line"), [(d, line) for d, line in upstream_lines() if d.startswith("FAIL")])
def test_each_upstream_fail_line_fails_for_the_reason_named(tmp_path: Path, decision: str, line: str) -> None:
    trace, summary = PASS_TRACE, PASS_SUMMARY
    if decision.startswith("FAIL-TRACE"):
        trace = line
    else:
        summary = line
    (request,) = attribute(scans(tmp_path, [BANNER, summary, trace]), 1, speculative=True).requests
    reasons = " | ".join(check_spec_request(Observed(0, 0, request), q=4).reasons)
    expected = {
        "FAIL-TRACE declared 3, contains 2": "declares n=3 but lists 2 IDs",
        "FAIL-TRACE empty": "trace is empty",
        "FAIL-TRACE exact run without speculation": "expected reference_exact=1 speculation=1",
        "FAIL-SUMMARY no work": "steps=0",
        "FAIL-SUMMARY all accepted": "no rejection observed",
        "FAIL-SUMMARY no counters": "the summary has no matched/offered counters",
        "FAIL-SUMMARY no full snapshots": "full_snap=0",
    }[decision]
    assert expected in reasons, reasons


def test_records_on_stdout_are_attributed_like_those_on_stderr(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, [BANNER, PASS_SUMMARY] * 2, [PASS_TRACE] * 2), 2, speculative=True)
    assert log.problems == ()
    assert all(r.traces and r.summaries for r in log.requests)


def test_the_kth_trace_belongs_to_the_kth_request(tmp_path: Path) -> None:
    lines = [f"[ds4-exact-verify-trace] reference_exact=0 speculation=0 n=1 ids=[{k}]" for k in range(5)]
    log = attribute(scans(tmp_path, lines), 5, speculative=False)
    assert [r.traces[0].ids for r in log.requests] == [(k,) for k in range(5)]


def test_a_count_that_does_not_match_the_requests_fails_with_both_counts(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, [TARGET_TRACE] * 3), 4, speculative=False)
    assert "holds 3 [ds4-exact-verify-trace] line(s) for 4 request(s)" in log.problems[0]
    assert all(r.traces == () for r in log.requests)


def test_a_family_split_over_two_streams_cannot_be_attributed(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, [TARGET_TRACE], [TARGET_TRACE]), 2, speculative=False)
    assert "more than one stream (stderr: 1, stdout: 1)" in log.problems[0]


def test_failure_line_fails_the_request_whose_summary_follows_it(tmp_path: Path) -> None:
    stderr = [BANNER, PASS_SUMMARY, PASS_TRACE, BANNER, "[ds4-spec] snapshot restore failed", PASS_SUMMARY, PASS_TRACE]
    log = attribute(scans(tmp_path, stderr), 2, speculative=True)
    assert log.requests[0].problems == ()
    assert "[ds4-spec] snapshot restore failed" in log.requests[1].problems[0]
    check = check_spec_request(Observed(0, 1, log.requests[1]), q=4)
    assert any("snapshot restore failed" in r for r in check.reasons)


def test_no_banner_and_no_summary_says_the_server_ran_without_speculation(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, ["[ds4-exact-verify-trace] reference_exact=1 speculation=0 n=3 ids=[8 13 21]"]), 1,
                    speculative=True)
    assert "served without speculation" in log.problems[0]
    assert "draft did not load" in log.problems[0]


def test_speculation_in_the_target_only_arm_fails_server_wide(tmp_path: Path) -> None:
    log = attribute(scans(tmp_path, [BANNER, PASS_SUMMARY, TARGET_TRACE]), 1, speculative=False)
    assert "speculation was active" in log.problems[0]
    assert check_target_only_request(Observed(0, 0, log.requests[0])).reasons == []  # judged server-wide instead


def test_a_flood_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    path.write_text(f"{TARGET_TRACE}\n" * 50)
    flood = scan_log(path, "stderr", 10)
    empty = tmp_path / "stdout.log"
    empty.write_text("")
    log = attribute([flood, scan_log(empty, "stdout", 10)], 1, speculative=False)
    assert any("a flood" in p for p in log.problems)
