"""``ds4ci gate --junit-xml PATH``: the run as JUnit XML, for the test reporters CI users already run
(dorny/test-reporter, EnricoMi/publish-unit-test-result-action).

One testcase per width and prompt (``q=3 prompt 0``), plus one each for target-only, the build, every
check and the run's verdict, so a run that stopped before any width (a failed build, a missing file)
is never an empty, green suite. A fail is a ``<failure>``, an error or a step not run an ``<error>``;
the reason is the message, every reason the text.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ds4ci.report.docview import DocView
from ds4ci.report.docview.build import Viewable, as_views

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot hold
MAX_MESSAGE = 1000


def _text(value: str) -> str:
    return _NOT_XML.sub("?", value)


def _case(suite: ET.Element, classname: str, name: str, verdict: str, reasons: list[str],
          time_s: float | None = None) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=_text(name))
    if time_s is not None:
        case.set("time", f"{time_s:.3f}")
    if verdict == "pass":
        return
    kind = "failure" if verdict == "fail" else "error"
    said = reasons or [f"verdict {verdict}, no reason recorded"]
    outcome = ET.SubElement(case, kind, message=_text(said[0])[:MAX_MESSAGE], type=verdict)
    outcome.text = _text("\n".join(said))


def _suite(suites: ET.Element, doc: DocView) -> ET.Element:
    classname = f"ds4ci.{doc.name}"
    suite = ET.SubElement(suites, "testsuite", name=f"ds4ci/{doc.name}", timestamp=doc.started_at,
                          time=f"{doc.gate_s:.3f}")
    if doc.build_step is not None:
        status, summary, seconds = doc.build_step
        _case(suite, classname, "build", status, [summary], seconds)
    for check in doc.checks:
        _case(suite, classname, f"check {check['name']}", check["status"], [check["summary"]], check["duration_s"])
    if doc.target_verdict != "not_run" or doc.width_lines:
        _case(suite, classname, "target-only", doc.target_verdict, list(doc.target_reasons))
    for width in doc.width_lines:
        if not width.cells:
            _case(suite, classname, f"q={width.q}", width.verdict, list(width.reasons))
        for cell in width.cells:
            _case(suite, classname, f"q={width.q} prompt {cell.prompt_index}", cell.verdict,
                  list(cell.reasons or width.reasons))
    _case(suite, classname, "verdict", doc.verdict, list(doc.all_reasons))
    return suite


def _count(element: ET.Element, cases: list[ET.Element]) -> None:
    counts = {"tests": len(cases), "failures": sum(1 for c in cases if c.find("failure") is not None),
              "errors": sum(1 for c in cases if c.find("error") is not None), "skipped": 0}
    for key, value in counts.items():
        element.set(key, str(value))


def render(docs: Sequence[Viewable]) -> str:
    """One testsuite per runner's view (a validated document is viewed first), in one testsuites element."""
    suites = ET.Element("testsuites", name="ds4ci")
    every: list[ET.Element] = []
    for doc in as_views(docs, read_vocab=False):
        suite = _suite(suites, doc)
        cases = suite.findall("testcase")
        _count(suite, cases)
        every += cases
    _count(suites, every)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write(doc: Viewable, path: Path) -> None:
    from ds4ci.fileio import write_new

    write_new(path, render([doc]).encode("utf-8"))
