"""Checks and the build judged from their sealed run records, logs and reports (ds4ci/judging/steps.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from paths import TESTS

from ds4ci.judging.steps import StepRecordError, build_result, check_result

DATA = TESTS / "data" / "checks"


def record(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "ctest", "parser": "ctest", "command": "ctest", "timeout_s": 60, "log": "check-ctest.log",
        "report": None, "start_error": None, "timed_out": False, "abandoned": False, "exit_code": 8, "duration_s": 1.5,
    }
    return {**base, **changes}


def test_the_sealed_log_decides_not_the_exit_code(tmp_path: Path) -> None:
    (tmp_path / "check-ctest.log").write_bytes((DATA / "ctest-fail.txt").read_bytes())
    failed = check_result(record(), tmp_path, "here")
    assert (failed["status"], failed["exit_code"], failed["failed"]) == ("fail", 8, 2)
    assert check_result(record(exit_code=0), tmp_path, "here")["status"] == "fail"  # the log still lists failures
    assert failed["log_tail"] == (DATA / "ctest-fail.txt").read_text()[-4096:]


def test_a_junit_report_is_read_from_its_sealed_copy(tmp_path: Path) -> None:
    (tmp_path / "check-unit.log").write_text("")
    (tmp_path / "check-unit.report").write_bytes((DATA / "pytest-junit-fail.xml").read_bytes())
    found = check_result(record(parser="junit", log="check-unit.log", report="check-unit.report", exit_code=0), tmp_path, "x")
    assert found["status"] == "fail"
    with pytest.raises(StepRecordError, match=re.escape("check-other.report is missing")):
        check_result(record(parser="junit", log="check-unit.log", report="check-other.report"), tmp_path, "x")


@pytest.mark.parametrize(("change", "message"), [
    ({"log": "../../etc/hostname"}, "is not a file name the gate writes"),
    ({"log": "check-none.log"}, "check-none.log is missing"),
    ({"exit_code": "0"}, "exit_code must be int or null"),
    ({"timed_out": 1}, "timed_out must be bool"),
    ({"parser": "tap"}, "parser 'tap' is not one of"),
])
def test_a_malformed_record_is_refused_with_a_message(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    (tmp_path / "check-ctest.log").write_text("")
    with pytest.raises(StepRecordError, match=re.escape(message)):
        check_result(record(**change), tmp_path, "here")


def test_the_build_fails_on_its_exit_code_and_errs_on_a_timeout(tmp_path: Path) -> None:
    (tmp_path / "build.log").write_bytes((DATA / "ninja-fail.txt").read_bytes())
    common = {"log": "build.log", "cwd": "/src", "server_bin": "/src/out/dflash_server"}
    failed = build_result({**record(**common), "exit_code": 1}, tmp_path, "build")
    assert failed["status"] == "fail" and failed["summary"].startswith("the build failed: exit 1")
    timed_out = build_result({**record(**common), "exit_code": None, "timed_out": True}, tmp_path, "build")
    assert timed_out["status"] == "error" and timed_out["summary"].startswith("timed out after 60 s")
