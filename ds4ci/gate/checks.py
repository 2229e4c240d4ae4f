"""Extra checks from ``[[checks]]``: run a maintainer's command, read its outcome, never guess.

Each check runs ``bash -c COMMAND`` (the command is maintainer-written configuration, not PR
input) under ``ds4ci.supervisor`` with a deadline: on timeout it gets SIGTERM, then SIGKILL, and
whatever it started (helpers, double-forked daemons) is killed and reaped when it ends, so no
process outlives the check. Output goes to ``log_dir/check-<slug>.log``.

A parser turns the output into counts. The status is "pass" only when the command exited 0,
the parser found what it needs and nothing failed; a parser that finds nothing is an "error"
with a reason, never a pass (a test runner that crashed before its summary proves nothing).
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ds4ci import supervisor
from ds4ci.gate import views
from ds4ci.log import Logger, as_logger
from ds4ci.options.config import CHECK_PARSERS, CheckSpec
from ds4ci.options.policy import CREDENTIAL_VARIABLES
from ds4ci.records import CheckParser, CheckResult, StepStatus

LOG_TAIL_BYTES = 4096
MAX_PARSE_BYTES = 64 * 1024 * 1024  # parse at most the last 64 MiB of a (build) log
MAX_REPORT_BYTES = 64 * 1024 * 1024
MAX_TEXT = 4096  # the schema's "text" limit
KILL_GRACE_S = 5.0

Progress = Callable[[str], None]


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


# --- running ------------------------------------------------------------------------------------


def slug(name: str) -> str:
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")[:60]
    return text or "check"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def check_env() -> dict[str, str]:
    """The inherited environment minus credentials: checks build and run pull-request code."""
    return {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}  # a check runs PR code


def _run_group(
    command: str, cwd: Path | None, log: Path, timeout_s: float, sup: supervisor.Supervisor, view: supervisor.View
) -> supervisor.RunResult:
    """Run ``bash -c command`` (in the sandbox) with stdout and stderr in ``log``; all it started is swept."""
    return sup.run(
        ["bash", "-c", command],
        timeout_s,
        cwd=cwd,
        env=check_env(),
        stdout=log,
        stderr=supervisor.STDOUT,
        grace_s=KILL_GRACE_S,
        view=view,
    )


def _tail(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read(limit)
    except OSError:
        return b""


def _report_stamp(path: Path | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_report(path: Path | None, stamp_before: tuple[int, int, int, int] | None) -> bytes | None:
    """The report's bytes, or None if this run did not (re)write it: a stale file proves nothing."""
    if path is None:
        return None
    stamp = _report_stamp(path)
    if stamp is None or stamp == stamp_before:
        return None
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_REPORT_BYTES + 1)
    except OSError:
        return None


def run_check(
    spec: CheckSpec, log: Path, sup: supervisor.Supervisor | None = None, progress: Progress | None = None,
    view: supervisor.View | None = None,
) -> CheckResult:
    """Run one check (in ``view``, default ``views.check_view``) and return the schema's ``check`` object."""
    report_before = _report_stamp(spec.report)
    exit_code: int | None = None
    seconds = 0.0
    try:
        run = _run_group(
            spec.command, spec.cwd, log, spec.timeout_s, sup or supervisor.default(), view or views.check_view(spec)
        )
    except (OSError, supervisor.SupervisorError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        outcome = _error(f"could not start the command in {spec.cwd or Path.cwd()}: {why}")
    else:
        seconds = run.duration_s
        exit_code = None if run.timed_out else run.returncode
        text = _tail(log, MAX_PARSE_BYTES).decode("utf-8", errors="replace")
        if run.abandoned:
            outcome = _error(f"{'timed out; ' if run.timed_out else ''}a process it started survived SIGKILL "
                             "(uninterruptible sleep?) and was abandoned")
        elif run.timed_out:
            outcome = _error(f"timed out after {spec.timeout_s:g} s; it and everything it started were killed")
        else:
            outcome = parse_output(spec.parser, text, exit_code, _read_report(spec.report, report_before))
        if progress is not None and run.killed:
            more = f"; and {len(run.killed) - 5} more" if len(run.killed) > 5 else ""
            shown = "; ".join(str(k) for k in run.killed[:5]) + more
            progress(f"check {spec.name}: killed {len(run.killed)} process(es) it left running: {shown}")
    tail = _tail(log, LOG_TAIL_BYTES).decode("utf-8", errors="replace")
    return {
        "name": _clip(spec.name),
        "parser": cast(CheckParser, spec.parser),  # one of CHECK_PARSERS: options/config.py refuses others
        "command": _clip(spec.command),
        "status": outcome.status,
        "passed": outcome.passed,
        "failed": outcome.failed,
        "skipped": outcome.skipped,
        "total": outcome.total,
        "duration_s": round(seconds, 3),
        "exit_code": exit_code,
        "summary": _clip(outcome.summary),
        "log_tail": tail,
    }


def run_checks(
    specs: Sequence[CheckSpec],
    log_dir: Path,
    progress: Progress | Logger | None = None,
    sup: supervisor.Supervisor | None = None,
) -> list[CheckResult]:
    """Run every check in order (each is judged on its own); logs go to ``log_dir``.

    ``sup`` is the supervisor to run them under (default: the process-wide one), whose
    ``containment`` says what held.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log = as_logger(progress)
    results = []
    used: set[str] = set()
    for spec in specs:
        name = slug(spec.name)
        unique, n = name, 2
        while unique in used:  # distinct names can share a slug; logs must not overwrite each other
            unique, n = f"{name}-{n}", n + 1
        used.add(unique)
        with log.group(f"check {spec.name}"):
            log(f"check {spec.name}: running ({spec.parser}, timeout {spec.timeout_s:g} s)")
            result = run_check(spec, log_dir / f"check-{unique}.log", sup, log)
            log(f"check {spec.name}: {result['status']}: {result['summary']} ({result['duration_s']:.1f} s)")
        results.append(result)
    return results
