"""`ds4ci gate --junit-xml PATH` (issue 41, item 6): one testcase per width and prompt, the reason as the
failure message, valid JUnit XML that ds4ci's own [[checks]] junit parser (CTest's and pytest's dialect) reads
back with the same counts; a run that stopped at its build is no empty, green suite."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import Workspace
from test_build import build_config

from ds4ci.judging.steps import parse_junit

pytestmark = pytest.mark.e2e


def cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "ds4ci/test-runner"
    found = {c.get("name", ""): c for c in suite.findall("testcase")}
    assert int(suite.get("tests", "-1")) == len(found)
    assert int(suite.get("failures", "-1")) == sum(c.find("failure") is not None for c in found.values())
    assert int(suite.get("errors", "-1")) == sum(c.find("error") is not None for c in found.values())
    return found


def test_a_pass_and_a_fail_as_junit_xml(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path, prompts=2)
    out = tmp_path / "junit.xml"
    passed = ws.gate("--junit-xml", str(out), widths="2,3")
    assert passed.code == 0, passed.stderr
    assert f"junit: {out}" in passed.stdout
    found = cases(out)
    assert {"q=2 prompt 0", "q=2 prompt 1", "q=3 prompt 0", "q=3 prompt 1", "target-only", "verdict"} == set(found)
    assert not [n for n, c in found.items() if len(c)]  # every one passed
    assert parse_junit(out.read_bytes(), 0).status == "pass"
    failed = ws.gate("--junit-xml", str(out), widths="2", faults="leak-fused-verify")
    assert failed.code == 1, failed.stderr
    assert failed.results is not None
    found = cases(out)
    failure = found["q=2 prompt 0"].find("failure")
    assert failure is not None, ET.tostring(found["q=2 prompt 0"])
    cell = failed.results["widths"][0]["prompts"][0]
    assert failure.get("message") == cell["reasons"][0]
    assert found["verdict"].find("failure") is not None
    outcome = parse_junit(out.read_bytes(), 1)
    assert outcome.status == "fail" and outcome.failed and outcome.failed >= 2, outcome


def test_a_failed_build_is_a_failing_suite_not_an_empty_one(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    out = tmp_path / "junit.xml"
    run = ws.gate("--junit-xml", str(out), widths="2", server_bin=None, config=build_config(ws, steps=2, fail_at=2))
    assert run.code == 1, run.stderr
    found = cases(out)
    assert set(found) == {"build", "verdict"}
    build = found["build"].find("failure")
    assert build is not None and (build.get("message") or "").startswith("the build failed: exit 1")
    as_dir = ws.gate("--junit-xml", str(tmp_path), widths="2")
    assert as_dir.code == 2 and "--junit-xml" in as_dir.stderr and "directory" in as_dir.stderr
