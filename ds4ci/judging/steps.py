"""Judging a build or an extra check from its sealed log, report and run record: the gate and verify alike.

The gate runs a ``[[checks]]`` command or the ``[build]`` under the supervisor, then seals what
happened in a run record (``checks/checks.json``, ``build/build.json``: exit code, timeout, duration)
next to the command's complete log and a copy of its report. The functions here read those files
back and judge them, so ``ds4ci verify`` re-judges a check or a build from the same files with the
same code.

A parser turns the output into counts. The status is "pass" only when the command exited 0,
the parser found what it needs and nothing failed; a parser that finds nothing is an "error"
with a reason, never a pass (a test runner that crashed before its summary proves nothing).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ds4ci.judging import builderror
from ds4ci.options.config import CHECK_PARSERS
from ds4ci.records import BuildRecord, CheckParser, CheckResult, StepStatus

LOG_TAIL_BYTES = 4096
MAX_PARSE_BYTES = 64 * 1024 * 1024  # parse at most the last 64 MiB of a (build) log
MAX_REPORT_BYTES = 64 * 1024 * 1024
MAX_TEXT = 4096  # the schema's "text" limit
BUILD_REASON_LINES = 3  # a failed build's reason ends with its log's last lines
FIRST_ERROR = "; first error: "  # a failed build's summary, then the compiler's first error line
# The line the gate ends a check's or the build's log with when it cut that log at log_cap_mib.
CUT_MARKER = b"[ds4ci] log cut here:"
_CUT_TAIL = 512


@dataclass(frozen=True)
class CheckOutcome:
    status: StepStatus
    passed: int | None
    failed: int | None
    skipped: int | None
    total: int | None
    summary: str


def _error(summary: str) -> CheckOutcome:
    return CheckOutcome("error", None, None, None, None, summary)


def _judge(
    exit_code: int, passed: int | None, failed: int | None, skipped: int | None, total: int | None, summary: str
) -> CheckOutcome:
    """pass only if the command exited 0 and nothing failed; counts are kept either way."""
    if exit_code != 0:
        return CheckOutcome("fail", passed, failed, skipped, total, f"{summary} (exit code {exit_code})")
    if failed is None or failed > 0:
        return CheckOutcome("fail", passed, failed, skipped, total, summary)
    return CheckOutcome("pass", passed, failed, skipped, total, summary)


def _counts(passed: int, failed: int, skipped: int, total: int) -> str:
    text = f"{passed}/{total} passed"
    if failed:
        text += f", {failed} failed"
    return text + f", {skipped} skipped"


# --- junit --------------------------------------------------------------------------------------

def _attr_int(elem: ET.Element, name: str) -> int:
    value = elem.get(name, "0").strip() or "0"
    try:
        number = int(value)
    except ValueError:
        number = int(float(value))  # some writers emit "3.0"; a non-number raises ValueError
    if number < 0:
        raise ValueError(f"negative {name}={value!r}")
    return number


def parse_junit(report_xml: bytes | None, exit_code: int) -> CheckOutcome:
    """JUnit XML as written by CTest ``--output-junit`` and pytest ``--junitxml``.

    The report is untrusted data (a PR's tests write it): it is parsed by defusedxml with every
    DOCTYPE refused outright (so no entity, expanding or external, is ever declared), after
    decoding it as UTF-8 so a declared encoding cannot change what the parser sees.
    """
    import defusedxml  # type: ignore[import-untyped, unused-ignore]
    import defusedxml.ElementTree as safe_et  # type: ignore[import-untyped, unused-ignore]

    if report_xml is None:
        return _error(f"no JUnit report was written by this run (exit code {exit_code})")
    if len(report_xml) > MAX_REPORT_BYTES:
        return _error(f"JUnit report is larger than {MAX_REPORT_BYTES} bytes")
    try:
        text = report_xml.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _error(f"JUnit report is not UTF-8 ({exc.reason} at byte {exc.start})")
    try:
        root: ET.Element = safe_et.fromstring(text, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except defusedxml.DefusedXmlException as exc:
        return _error(f"JUnit report contains a DOCTYPE/ENTITY declaration; refused as unsafe ({exc})")
    except ET.ParseError as exc:
        return _error(f"JUnit report is not well-formed XML ({exc})")
    if root.tag not in ("testsuites", "testsuite"):
        return _error(f"JUnit report root is <{root.tag}>; expected <testsuites> or <testsuite>")
    failed = skipped = total = 0
    for case in root.iter("testcase"):
        total += 1
        children = {child.tag for child in case}
        if children & {"failure", "error"}:
            failed += 1
        elif "skipped" in children or case.get("status") in ("disabled", "notrun"):
            skipped += 1  # CTest marks disabled tests by status only
    try:
        # The suites' own counters must not hide a failure the test cases do not show.
        suites = [root] if root.tag == "testsuite" else [s for s in root.iter("testsuite") if s.find("testsuite") is None]
        declared_failed = sum(_attr_int(s, "failures") + _attr_int(s, "errors") for s in suites)
        if root.tag == "testsuites":
            declared_failed = max(declared_failed, _attr_int(root, "failures") + _attr_int(root, "errors"))
    except ValueError as exc:
        return _error(f"JUnit report has a malformed counter attribute ({exc})")
    failed = max(failed, declared_failed)
    if total == 0:
        return _error(f"JUnit report lists no test cases (exit code {exit_code}); an empty run proves nothing")
    passed = max(total - failed - skipped, 0)
    return _judge(exit_code, passed, failed, skipped, total, _counts(passed, failed, skipped, total))


# --- ctest text ---------------------------------------------------------------------------------

_CTEST_SUMMARY = re.compile(r"^\s*(\d+)% tests passed, (\d+) tests? failed out of (\d+)\s*$", re.MULTILINE)
_CTEST_TIME = re.compile(r"^\s*Total Test time \(real\) =\s*([0-9.]+) sec", re.MULTILINE)
_CTEST_ITEM = re.compile(r"^\s*(\d+) - (.+?) \(([^()]*)\)\s*$")


def _ctest_section(lines: list[str], header: str) -> list[tuple[str, str]]:
    """Items ``N - name (Reason)`` under the last occurrence of a header line."""
    starts = [i for i, line in enumerate(lines) if line.strip() == header]
    if not starts:
        return []
    items = []
    for line in lines[starts[-1] + 1 :]:
        match = _CTEST_ITEM.match(line)
        if match is None:
            break
        items.append((match.group(2), match.group(3)))
    return items


def parse_ctest(text: str, exit_code: int) -> CheckOutcome:
    matches = list(_CTEST_SUMMARY.finditer(text))
    if not matches:
        hint = " (CTest said: No tests were found)" if "No tests were found" in text else ""
        return _error(f"no CTest summary line ('N% tests passed, F tests failed out of T'){hint}; "
                      f"exit code {exit_code}")
    last = matches[-1]
    failed, total = int(last.group(2)), int(last.group(3))
    tail_lines = text[last.start():].splitlines()
    failed_items = _ctest_section(tail_lines, "The following tests FAILED:")
    not_run = _ctest_section(tail_lines, "The following tests did not run:")
    failed = max(failed, len(failed_items))  # never trust a summary that lists more failures than it counts
    # CTest counts skipped tests as passed in its summary and leaves disabled ones out of it;
    # here both are "skipped" and the total covers every test CTest knew of.
    disabled = sum(1 for _, why in not_run if why == "Disabled")
    passed = total - failed - (len(not_run) - disabled)
    total += disabled
    if total == 0 or passed < 0:
        return _error(f"CTest summary is empty or inconsistent: {last.group(0).strip()!r}")
    summary = _counts(passed, failed, len(not_run), total)
    seconds = _CTEST_TIME.search(text, last.start())
    if seconds is not None:
        summary += f" in {float(seconds.group(1)):.1f} s"
    if failed_items:
        names = ", ".join(f"{name} ({why})" for name, why in failed_items[:10])
        more = f" and {len(failed_items) - 10} more" if len(failed_items) > 10 else ""
        summary += f"; failed: {names}{more}"
    return _judge(exit_code, passed, failed, len(not_run), total, summary)


# --- build progress -----------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


def parse_build_progress(text: str, exit_code: int) -> CheckOutcome:
    """Ninja-style ``[N/M] ...`` lines; the last one decides (N == M means every step ran)."""
    last: tuple[int, int] | None = None
    for line in re.split(r"[\r\n]+", text):
        match = _PROGRESS.match(line.lstrip())
        if match is not None:
            last = (int(match.group(1)), int(match.group(2)))
    if last is None:
        if exit_code == 0 and re.search(r"^ninja: no work to do\.\s*$", text, re.MULTILINE):
            return CheckOutcome("pass", 0, 0, None, 0, "up to date: ninja had no work to do")
        return _error(f"no build progress line like [465/465] in the output; exit code {exit_code}")
    done, steps = last
    if steps == 0 or done > steps:
        return _error(f"build progress [{done}/{steps}] makes no sense")
    return _judge(exit_code, done, steps - done, None, steps, f"[{done}/{steps}] build steps")


# --- compute-sanitizer --------------------------------------------------------------------------

_SANITIZER = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?\b", re.MULTILINE)


def parse_compute_sanitizer(text: str, exit_code: int) -> CheckOutcome:
    """``========= ERROR SUMMARY: N errors``: one per sanitized process; every one must be 0."""
    counts = [int(m.group(1)) for m in _SANITIZER.finditer(text)]
    if not counts:
        return _error(f"no compute-sanitizer 'ERROR SUMMARY' line; exit code {exit_code}")
    errors = sum(counts)
    runs = f" over {len(counts)} runs" if len(counts) > 1 else ""
    return _judge(exit_code, None, errors, None, None, f"{errors} sanitizer error(s){runs}")


def parse_output(parser: str, text: str, exit_code: int | None, report_xml: bytes | None) -> CheckOutcome:
    """Judge one finished command. ``exit_code`` None means it never exited by itself."""
    if parser not in CHECK_PARSERS:
        return _error(f"unknown parser {parser!r}; expected one of {', '.join(CHECK_PARSERS)}")
    if exit_code is None:
        return _error("the command did not finish, so nothing can be judged")
    text = _ANSI.sub("", text)  # CTest colours its summary when CLICOLOR_FORCE is set
    if parser == "junit":
        return parse_junit(report_xml, exit_code)
    if parser == "ctest":
        return parse_ctest(text, exit_code)
    if parser == "build-progress":
        return parse_build_progress(text, exit_code)
    if parser == "compute-sanitizer":
        return parse_compute_sanitizer(text, exit_code)
    return CheckOutcome("pass" if exit_code == 0 else "fail", None, None, None, None, f"exit code {exit_code}")


# --- judging a sealed run record ----------------------------------------------------------------

_LOG_NAME = re.compile(r"^(check-[a-z0-9._-]+|build)\.log$")
_REPORT_NAME = re.compile(r"^check-[a-z0-9._-]+\.report$")


class StepRecordError(Exception):
    """A check's or a build's sealed run record that is not as the gate writes it (never a verdict)."""


def clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def tail(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of a file (empty when it cannot be read)."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read(limit)
    except OSError:
        return b""


def cut_line(path: Path) -> str | None:
    """The gate's cut line when a sealed check or build log ends with it (the log was cut at the cap), else None."""
    last = tail(path, _CUT_TAIL).rstrip(b"\n").rpartition(b"\n")[2]
    return last[len(CUT_MARKER):].decode("utf-8", errors="replace").strip() if last.startswith(CUT_MARKER) else None


def log_was_cut(path: Path) -> bool:
    """Whether a check's or the build's sealed log ends with the line the gate writes when it cuts it."""
    return cut_line(path) is not None


def _field(record: Mapping[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    value = record.get(key)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise StepRecordError(f"{where}: {key} must be {names}, found {value!r:.80}")
    return value


def _sealed_file(directory: Path, name: str, pattern: re.Pattern[str], where: str) -> Path:
    """A file named by a run record: a plain name of the gate's own form, a regular file in ``directory``."""
    if not pattern.match(name):
        raise StepRecordError(f"{where}: {name!r:.80} is not a file name the gate writes")
    path = directory / name
    if path.is_symlink() or not path.is_file():
        raise StepRecordError(f"{where}: {directory.name}/{name} is missing from the evidence")
    return path


def _outcome(record: Mapping[str, Any], directory: Path, where: str) -> CheckOutcome:
    """What the sealed record, log and report say about one finished (or failed) command."""
    start_error = _field(record, "start_error", (str, type(None)), where)
    timed_out = _field(record, "timed_out", (bool,), where)
    abandoned = _field(record, "abandoned", (bool,), where)
    exit_code = _field(record, "exit_code", (int, type(None)), where)
    timeout_s = _field(record, "timeout_s", (int, float), where)
    log = _sealed_file(directory, _field(record, "log", (str,), where), _LOG_NAME, where)
    report_name = _field(record, "report", (str, type(None)), where)
    if start_error is not None:
        return _error(start_error)
    if abandoned:
        return _error(f"{'timed out; ' if timed_out else ''}a process it started survived SIGKILL "
                      "(uninterruptible sleep?) and was abandoned")
    if (cut := cut_line(log)) is not None:
        return _error(f"its log was cut: {cut}; raise log_cap_mib or make the command quieter")
    if timed_out:
        return _error(f"timed out after {timeout_s:g} s; it and everything it started were killed")
    report = None
    if report_name is not None:
        with _sealed_file(directory, report_name, _REPORT_NAME, where).open("rb") as fh:
            report = fh.read(MAX_REPORT_BYTES + 1)
    text = tail(log, MAX_PARSE_BYTES).decode("utf-8", errors="replace")
    return parse_output(_field(record, "parser", (str,), where), text, exit_code, report)


def check_result(record: Mapping[str, Any], directory: Path, where: str) -> CheckResult:
    """The schema's ``check`` object, judged from a sealed run record and the files it names in ``directory``."""
    if not isinstance(record, Mapping):
        raise StepRecordError(f"{where}: expected a run record (an object), found {type(record).__name__}")
    parser = _field(record, "parser", (str,), where)
    if parser not in CHECK_PARSERS:
        raise StepRecordError(f"{where}: parser {parser!r:.80} is not one of {', '.join(CHECK_PARSERS)}")
    outcome = _outcome(record, directory, where)
    duration = _field(record, "duration_s", (int, float), where)
    log = directory / record["log"]
    return {
        "name": clip(_field(record, "name", (str,), where)),
        "parser": cast(CheckParser, parser),
        "command": clip(_field(record, "command", (str,), where)),
        "status": outcome.status,
        "passed": outcome.passed,
        "failed": outcome.failed,
        "skipped": outcome.skipped,
        "total": outcome.total,
        "duration_s": round(duration, 3),
        "exit_code": record["exit_code"],
        "summary": clip(outcome.summary),
        "log_tail": tail(log, LOG_TAIL_BYTES).decode("utf-8", errors="replace"),
    }


def build_reason(build: BuildRecord) -> str:
    """The one reason of a run whose build did not pass: what happened (for a failure, the summary quotes the
    compiler's first error) and its log's last lines, make's closing ``*** ... Error`` lines left out."""
    if build["status"] == "error":
        return f"the build ended without a verdict: {build['summary']}"
    quoted = build["summary"].partition(FIRST_ERROR)[2]  # the compiler's error, already said: not again
    lines = [line.strip() for line in build["log_tail"].splitlines()
             if line.strip() and not builderror.is_closing(line) and line.strip() != quoted][-BUILD_REASON_LINES:]
    shown = " | ".join(line if len(line) <= 160 else line[:159] + "…" for line in lines)
    return build["summary"] + (f"; last lines: {shown}" if lines else "")


def build_result(record: Mapping[str, Any], directory: Path, where: str) -> BuildRecord:
    """The schema's ``build`` object: the exit code decides; ``[N/M]`` lines give the target counts."""
    if not isinstance(record, Mapping):
        raise StepRecordError(f"{where}: expected a run record (an object), found {type(record).__name__}")
    check = check_result({**record, "name": "build", "parser": "build-progress", "report": None}, directory, where)
    code = check["exit_code"]
    status: StepStatus
    if code is None or log_was_cut(directory / record["log"]):  # timed out, could not start, or log cut: no verdict
        status, summary = "error", check["summary"]
    elif code == 0 and not record["abandoned"]:
        status, summary = "pass", "built" + (f": {check['summary']}" if check["total"] is not None else "")
    elif code == 0:
        status, summary = "error", check["summary"]
    else:
        status, summary = "fail", f"the build failed: exit {code}" + (
            f" ({check['passed']}/{check['total']} targets built)" if check["total"] is not None else ""
        )
        text = tail(directory / record["log"], MAX_PARSE_BYTES).decode("utf-8", errors="replace")
        if (error := builderror.first_error(text.splitlines())) is not None:
            summary += f"{FIRST_ERROR}{error}"
    return {
        "command": check["command"],
        "cwd": clip(_field(record, "cwd", (str,), where)),
        "server_bin": clip(_field(record, "server_bin", (str,), where)),
        "status": status,
        "exit_code": code,
        "duration_s": check["duration_s"],
        "targets_built": check["passed"],
        "targets_total": check["total"],
        "summary": summary,
        "log_tail": check["log_tail"],
    }
