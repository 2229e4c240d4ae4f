"""checks.py: parsers on real captured outputs (tests/data/checks/) and real commands via bash."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import jsonschema
import pytest
from paths import TESTS
from procscan import MARKER_VARIABLE, describe, new_marker, supervisor_or_skip, wait_unmarked

from ds4ci import supervisor
from ds4ci.evidence.results import schema
from ds4ci.gate import checks
from ds4ci.gate.checks import run_checks
from ds4ci.judging.steps import CheckOutcome, log_was_cut, parse_output
from ds4ci.options.config import CheckSpec
from ds4ci.supervisor import sandbox

DATA = TESTS / "data" / "checks"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def counts(outcome: CheckOutcome) -> tuple[str, int | None, int | None, int | None, int | None]:
    return (outcome.status, outcome.passed, outcome.failed, outcome.skipped, outcome.total)


def validate_check(result: dict[str, object]) -> None:
    jsonschema.Draft202012Validator({"$defs": schema()["$defs"], "$ref": "#/$defs/check"}).validate(result)


# --- ctest text --------------------------------------------------------------------------------


def test_ctest_pass() -> None:
    outcome = parse_output("ctest", text("ctest-pass.txt"), 0, None)
    assert counts(outcome) == ("pass", 9, 0, 0, 9)
    assert outcome.summary == "9/9 passed, 0 skipped in 0.0 s"


def test_ctest_failures_skips_and_disabled() -> None:
    outcome = parse_output("ctest", text("ctest-fail.txt"), 8, None)
    # "83% tests passed, 2 tests failed out of 12": 12 excludes the disabled test, includes the skipped one.
    assert counts(outcome) == ("fail", 9, 2, 2, 13)
    assert "test-backend-ops (Failed)" in outcome.summary
    assert "test-quantize-fns (SEGFAULT)" in outcome.summary


def test_ctest_failures_fail_even_with_exit_0() -> None:
    assert parse_output("ctest", text("ctest-fail.txt"), 0, None).status == "fail"


def test_ctest_clean_summary_but_nonzero_exit_fails() -> None:
    outcome = parse_output("ctest", text("ctest-pass.txt"), 1, None)
    assert outcome.status == "fail" and "exit code 1" in outcome.summary


def test_ctest_no_tests_is_error_not_pass() -> None:
    outcome = parse_output("ctest", text("ctest-no-tests.txt"), 0, None)
    assert outcome.status == "error" and "No tests were found" in outcome.summary


def test_ctest_output_cut_before_summary_is_error() -> None:
    cut = text("ctest-pass.txt").split("100% tests passed")[0]
    assert parse_output("ctest", cut, 0, None).status == "error"


def test_ctest_coloured_summary_parses() -> None:
    coloured = text("ctest-fail.txt").replace("83% tests passed", "\x1b[0;32m83% tests passed\x1b[0;0m")
    coloured = coloured.replace("2 tests failed", "\x1b[0;31m2 tests failed\x1b[0;0m")
    assert counts(parse_output("ctest", coloured, 8, None)) == ("fail", 9, 2, 2, 13)


def test_ctest_list_of_failures_longer_than_its_count_is_believed() -> None:
    doctored = text("ctest-fail.txt").replace("2 tests failed out of 12", "0 tests failed out of 12")
    outcome = parse_output("ctest", doctored, 0, None)
    assert outcome.status == "fail" and outcome.failed == 2


# --- junit -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "exit_code", "expected"),
    [
        ("ctest-junit-pass.xml", 0, ("pass", 9, 0, 0, 9)),
        ("ctest-junit-fail.xml", 8, ("fail", 9, 2, 2, 13)),
        ("pytest-junit-pass.xml", 0, ("pass", 3, 0, 1, 4)),
        # failure + setup error = 2 failed; skip + xfail = 2 skipped
        ("pytest-junit-fail.xml", 1, ("fail", 3, 2, 2, 7)),
    ],
)
def test_junit_reports(name: str, exit_code: int, expected: tuple[str, int, int, int, int]) -> None:
    outcome = parse_output("junit", "", exit_code, (DATA / name).read_bytes())
    assert counts(outcome) == expected


def test_junit_summary_text() -> None:
    outcome = parse_output("junit", "", 0, (DATA / "pytest-junit-pass.xml").read_bytes())
    assert outcome.summary == "3/4 passed, 1 skipped"


def test_junit_missing_report_is_error() -> None:
    assert parse_output("junit", "all good", 0, None).status == "error"


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<testsuite tests="1" failures="0"><testcase name="&lol2;"/></testsuite>"""
EXTERNAL = b"""<?xml version="1.0"?>
<!DOCTYPE testsuite [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuite tests="1"><testcase name="&secret;"/></testsuite>"""


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (BILLION_LAUGHS, "DOCTYPE/ENTITY"),
        (EXTERNAL, "DOCTYPE/ENTITY"),
        # XML keywords are case-sensitive: a lower-case doctype is not XML at all.
        (EXTERNAL.replace(b"<!DOCTYPE", b"<!doctype"), "not well-formed"),
        # UTF-16 could hide "<!DOCTYPE" from a byte search: not accepted at all.
        ('<?xml version="1.0" encoding="UTF-16"?><testsuite/>'.encode("utf-16"), "not UTF-8"),
        (b"<testsuite><testcase name='a'>", "not well-formed"),
        (b"<results><testcase name='a'/></results>", "expected <testsuites> or <testsuite>"),
        (b"<testsuites><testsuite tests='0'/></testsuites>", "no test cases"),
        (b"<testsuite failures='-1'><testcase name='a'/></testsuite>", "malformed counter"),
        (b"<testsuite failures='x'><testcase name='a'/></testsuite>", "malformed counter"),
    ],
)
def test_junit_untrusted_or_empty_reports_are_errors(data: bytes, reason: str) -> None:
    outcome = parse_output("junit", "", 0, data)
    assert outcome.status == "error"
    assert reason in outcome.summary


@pytest.mark.parametrize(("data", "refusal"), [(BILLION_LAUGHS, "DTDForbidden"), (EXTERNAL, "DTDForbidden")])
def test_junit_entity_bombs_and_external_entities_are_refused_by_defusedxml(data: bytes, refusal: str) -> None:
    """The parser itself (defusedxml, DTDs forbidden) refuses them: no entity is expanded or fetched."""
    outcome = parse_output("junit", "", 0, data)
    assert outcome.status == "error"
    assert refusal in outcome.summary and "lol" * 10 not in outcome.summary and "root:" not in outcome.summary


def test_junit_nul_bytes_are_not_well_formed() -> None:
    outcome = parse_output("junit", "", 0, b"<testsuite><testcase name='a\x00'/></testsuite>")
    assert outcome.status == "error" and "not well-formed" in outcome.summary


def test_junit_declared_failures_are_not_hidden_by_cases() -> None:
    data = (
        b"<testsuites><testsuite tests='2' failures='1' errors='0'>"
        b"<testcase name='a'/><testcase name='b'/></testsuite></testsuites>"
    )
    outcome = parse_output("junit", "", 0, data)
    assert outcome.status == "fail" and outcome.failed == 1


def test_junit_nested_suites() -> None:
    data = (
        b"<testsuites><testsuite name='outer'><testsuite name='inner' tests='2' failures='0'>"
        b"<testcase name='a'/><testcase name='b'><skipped/></testcase></testsuite></testsuite></testsuites>"
    )
    assert counts(parse_output("junit", "", 0, data)) == ("pass", 1, 0, 1, 2)


# --- build progress ----------------------------------------------------------------------------


def test_ninja_complete_build() -> None:
    outcome = parse_output("build-progress", text("ninja-pass.txt"), 0, None)
    assert counts(outcome) == ("pass", 42, 0, None, 42)
    assert outcome.summary == "[42/42] build steps"


def test_ninja_failed_build() -> None:
    outcome = parse_output("build-progress", text("ninja-fail.txt"), 1, None)
    assert counts(outcome) == ("fail", 1, 1, None, 2)


def test_ninja_all_steps_but_nonzero_exit_fails() -> None:
    assert parse_output("build-progress", text("ninja-pass.txt"), 1, None).status == "fail"


def test_ninja_last_count_short_of_total_fails_even_with_exit_0() -> None:
    cut = text("ninja-pass.txt").split("[42/42]")[0]
    assert counts(parse_output("build-progress", cut, 0, None))[:2] == ("fail", 41)


def test_ninja_no_work_to_do_passes() -> None:
    assert parse_output("build-progress", text("ninja-no-work.txt"), 0, None).status == "pass"


def test_ninja_carriage_return_status_lines() -> None:
    smart_terminal = "[1/3] cc a.c\r[2/3] cc b.c\r[3/3] link x\n"
    assert counts(parse_output("build-progress", smart_terminal, 0, None)) == ("pass", 3, 0, None, 3)


def test_build_output_without_progress_is_error() -> None:
    assert parse_output("build-progress", "make: Nothing to be done for 'all'.\n", 0, None).status == "error"


# --- compute-sanitizer -------------------------------------------------------------------------


def test_sanitizer_clean() -> None:
    outcome = parse_output("compute-sanitizer", text("compute-sanitizer-clean.txt"), 0, None)
    assert counts(outcome) == ("pass", None, 0, None, None)


def test_sanitizer_errors() -> None:
    outcome = parse_output("compute-sanitizer", text("compute-sanitizer-errors.txt"), 1, None)
    assert counts(outcome) == ("fail", None, 4, None, None)


def test_sanitizer_errors_fail_even_with_exit_0() -> None:
    assert parse_output("compute-sanitizer", text("compute-sanitizer-errors.txt"), 0, None).status == "fail"


def test_sanitizer_summaries_of_several_runs_add_up() -> None:
    both = text("compute-sanitizer-clean.txt") + text("compute-sanitizer-errors.txt")
    outcome = parse_output("compute-sanitizer", both, 0, None)
    assert outcome.failed == 4 and "over 2 runs" in outcome.summary


def test_sanitizer_missing_summary_is_error() -> None:
    cut = text("compute-sanitizer-clean.txt").replace("ERROR SUMMARY", "")
    assert parse_output("compute-sanitizer", cut, 0, None).status == "error"


# --- exit code and generic rules ---------------------------------------------------------------


def test_exit_code_parser() -> None:
    assert parse_output("exit-code", "", 0, None).status == "pass"
    assert parse_output("exit-code", "", 3, None).status == "fail"


@pytest.mark.parametrize("parser", ["junit", "ctest", "build-progress", "compute-sanitizer", "exit-code"])
def test_no_exit_code_is_error_for_every_parser(parser: str) -> None:
    assert parse_output(parser, text("ctest-pass.txt"), None, None).status == "error"


def test_unknown_parser_is_error() -> None:
    assert parse_output("tap", "ok 1", 0, None).status == "error"


# --- running real commands ---------------------------------------------------------------------


def spec(name: str, command: str, parser: str = "exit-code", **kw: object) -> CheckSpec:
    return CheckSpec(name=name, command=command, parser=parser, **kw)  # type: ignore[arg-type]


def test_run_checks_records_schema_valid_results(tmp_path: Path) -> None:
    lines: list[str] = []
    specs = [
        spec("CTest suite", f"cat {shlex.quote(str(DATA / 'ctest-pass.txt'))}", "ctest"),
        spec("lint", "echo 'lint: 3 problems' >&2; exit 3"),
    ]
    results = run_checks(specs, tmp_path / "logs", progress=lines.append)
    for result in results:
        validate_check(result)
    ctest, lint = results
    assert (ctest["status"], ctest["passed"], ctest["total"], ctest["exit_code"]) == ("pass", 9, 9, 0)
    assert ctest["log_tail"].endswith("Total Test time (real) =   0.02 sec\n")
    assert (tmp_path / "logs" / "check-ctest-suite.log").read_text() == text("ctest-pass.txt")
    assert (lint["status"], lint["exit_code"], lint["summary"]) == ("fail", 3, "exit code 3")
    assert "lint: 3 problems" in lint["log_tail"]  # stderr is captured too
    assert lines[:2] == ["== check CTest suite", "check CTest suite: running (ctest, timeout 3600 s)"]  # its own group
    assert lines[-1].startswith("check lint: fail: ")


def test_log_tail_is_bounded_and_keeps_the_end(tmp_path: Path) -> None:
    command = "for i in $(seq 1 20000); do echo line $i; done"
    (result,) = run_checks([spec("noisy", command)], tmp_path)
    assert len(result["log_tail"].encode()) <= checks.LOG_TAIL_BYTES
    assert result["log_tail"].endswith("line 20000\n")
    validate_check(result)


def test_junit_check_with_a_real_pytest_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check runs this venv's pytest: the sandbox shows that interpreter read-only for this test only, as a
    # runner's [sandbox] ro_paths would for its own toolchain.
    monkeypatch.setenv(sandbox.RO_VARIABLE, sandbox.runtime_environment(os.environ)[sandbox.RO_VARIABLE])
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    assert True\n\n"
        "def test_bad():\n    assert 1 == 2\n\n"
        "@pytest.mark.skip(reason='no gpu')\ndef test_gpu():\n    pass\n"
    )
    report = tmp_path / "out" / "junit.xml"
    command = (
        f"mkdir -p out && {shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider "
        f"test_sample.py --junitxml={shlex.quote(str(report))}"
    )
    (result,) = run_checks([spec("unit", command, "junit", report=report, cwd=tmp_path)], tmp_path / "logs")
    validate_check(result)
    assert (result["status"], result["passed"], result["failed"], result["skipped"], result["total"]) == (
        "fail", 1, 1, 1, 3,
    )
    assert result["exit_code"] == 1


def test_stale_junit_report_is_not_trusted(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_bytes((DATA / "pytest-junit-pass.xml").read_bytes())
    (result,) = run_checks([spec("unit", "true", "junit", report=report)], tmp_path / "logs")
    assert result["status"] == "error"
    assert "no JUnit report was written by this run" in result["summary"]


def test_cwd_is_used_and_a_missing_cwd_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "marker").write_text("here\n")
    ok, missing = run_checks(
        [spec("in cwd", "cat marker", cwd=tmp_path), spec("nowhere", "true", cwd=tmp_path / "absent")],
        tmp_path / "logs",
    )
    assert ok["status"] == "pass" and ok["log_tail"] == "here\n"
    assert missing["status"] == "error" and "could not start" in missing["summary"]
    assert missing["exit_code"] is None
    validate_check(missing)


def killed_count(lines: list[str]) -> int:
    found = [re.search(r": killed (\d+) process\(es\)", line) for line in lines]
    return sum(int(m.group(1)) for m in found if m)


MODES = ["pid-namespace", "subreaper"]


@pytest.mark.parametrize("mode", MODES)
def test_timeout_kills_the_whole_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(checks, "KILL_GRACE_S", 0.5)
    marker = new_marker()
    monkeypatch.setenv(MARKER_VARIABLE, marker)
    # A helper in the background, and a foreground, that both ignore SIGTERM (the helper is started after the
    # trap, so it inherits the ignored signal): only SIGKILL to everything the check started ends both, and
    # both are still running to be named when it comes (the foreground's short sleeps may be between two).
    command = "trap '' TERM; sleep 300 & echo started; while :; do sleep 0.1; done"
    lines: list[str] = []
    sup = supervisor_or_skip(mode)
    (result,) = run_checks([spec("hang", command, timeout_s=1.0)], tmp_path / "logs", progress=lines.append, sup=sup)
    validate_check(result)
    assert result["status"] == "error" and result["exit_code"] is None
    assert "timed out after 1 s" in result["summary"]
    assert "started" in result["log_tail"]
    assert killed_count(lines) >= 2, lines  # the shell and its helper, at least
    left = wait_unmarked(marker)
    assert not left, describe(left)


@pytest.mark.parametrize("mode", MODES)
def test_background_helpers_do_not_outlive_a_finished_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    marker = new_marker()
    monkeypatch.setenv(MARKER_VARIABLE, marker)
    lines: list[str] = []
    command = "sleep 300 & ( setsid sleep 301 & ) ; echo started"
    sup = supervisor_or_skip(mode)
    (result,) = run_checks([spec("leaky", command)], tmp_path / "logs", progress=lines.append, sup=sup)
    assert result["status"] == "pass"
    assert killed_count(lines) >= 2, lines  # both helpers were still there, and were killed
    left = wait_unmarked(marker)
    assert not left, describe(left)


def test_credentials_are_not_passed_to_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret_value_for_the_test")
    monkeypatch.setenv("DS4CI_HIDDEN", "ds4ci's own")
    monkeypatch.setenv("LUCE_VISIBLE", "kept")
    (result,) = run_checks([spec("env", "env | grep -E '^(GITHUB_TOKEN|DS4CI_HIDDEN|LUCE_VISIBLE)=' || true")], tmp_path)
    assert "ghs_secret_value_for_the_test" not in result["log_tail"]
    assert "LUCE_VISIBLE=kept" in result["log_tail"]
    if supervisor.default().sandbox_refusal() is None:  # the sandbox builds the environment without ds4ci's
        assert "DS4CI_HIDDEN" not in result["log_tail"]


def test_names_with_the_same_slug_get_distinct_logs(tmp_path: Path) -> None:
    run_checks([spec("GPU tests", "echo one"), spec("gpu/tests", "echo two")], tmp_path)
    assert (tmp_path / "check-gpu-tests.log").read_text() == "one\n"
    assert (tmp_path / "check-gpu-tests-2.log").read_text() == "two\n"


def test_optional_live_ctest_and_ninja(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With CMake, Ninja and a C compiler present, judge a real build and a real CTest run."""
    import shutil

    monkeypatch.setenv("DS4CI_SANDBOX_RW_PATHS", str(tmp_path))  # as a runner's [sandbox] rw_paths would

    if not all(shutil.which(tool) for tool in ("cmake", "ctest", "ninja", "cc")):
        pytest.skip("cmake/ctest/ninja/cc not installed")
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(t C)\nenable_testing()\n"
        "add_executable(ok ok.c)\nadd_test(NAME ok COMMAND ok)\nadd_test(NAME bad COMMAND ok 1)\n"
    )
    (src / "ok.c").write_text("int main(int argc, char **argv) { (void)argv; return argc > 1; }\n")
    build = tmp_path / "build"
    report = build / "junit.xml"
    specs = [
        spec("build", f"cmake -S {src} -B {build} -G Ninja >/dev/null && cmake --build {build}", "build-progress"),
        spec("ctest", f"ctest --test-dir {build}", "ctest"),
        spec("ctest junit", f"cd {build} && ctest --output-junit {report}", "junit", report=report),
    ]
    build_result, ctest_result, junit_result = run_checks(specs, tmp_path / "logs")
    assert build_result["status"] == "pass", build_result["log_tail"]
    assert (ctest_result["status"], ctest_result["passed"], ctest_result["failed"]) == ("fail", 1, 1)
    assert (junit_result["status"], junit_result["passed"], junit_result["failed"]) == ("fail", 1, 1)


def test_a_check_log_is_cut_at_the_cap_and_the_cut_is_recorded(tmp_path: Path) -> None:
    """A check that writes 64 MiB with a 1 MiB cap: the sealed log keeps 1 MiB and says it was cut."""
    cap = 1 << 20
    command = "head -c 67108864 /dev/zero | tr '\\0' 'x'; echo done"
    (result,) = run_checks([spec("flood", command)], tmp_path, log_cap_bytes=cap)
    log = tmp_path / "check-flood.log"
    assert cap < log.stat().st_size < cap + 512
    assert log_was_cut(log)
    assert result["status"] == "error" and f"log cap of {cap} bytes" in result["summary"]
    assert str((64 << 20) + 5 - cap) in result["summary"]  # everything past the cap counted, nothing kept
    validate_check(result)


def test_a_quiet_check_is_not_cut(tmp_path: Path) -> None:
    (result,) = run_checks([spec("quiet", "head -c 1000000 /dev/zero | tr '\\0' 'y'")], tmp_path, log_cap_bytes=1 << 20)
    assert result["status"] == "pass" and not log_was_cut(tmp_path / "check-quiet.log")
    assert (tmp_path / "check-quiet.log").stat().st_size == 1000000
