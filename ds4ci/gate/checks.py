"""Extra checks from ``[[checks]]``: run a maintainer's command and seal what happened; never guess.

Each check runs ``bash -c COMMAND`` (the command is maintainer-written configuration, not PR
input) under ``ds4ci.supervisor`` with a deadline: on timeout it gets SIGTERM, then SIGKILL, and
whatever it started (helpers, double-forked daemons) is killed and reaped when it ends, so no
process outlives the check. Output goes to ``log_dir/check-<slug>.log``, cut at ``log_cap_mib``
(``cappedlog.py``, the cut written as the log's last line, which makes the check an error); a report the run wrote is
copied next to it (``check-<slug>.report``), and what happened (exit code, timeout, duration) is
sealed in ``log_dir/checks.json``. The verdict comes from those files only, through
``ds4ci.judging.steps`` (the code ``ds4ci verify`` re-judges them with).
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ds4ci import supervisor
from ds4ci.gate import views
from ds4ci.gate.cappedlog import CappedLog
from ds4ci.judging import confined
from ds4ci.judging.steps import LOG_TAIL_BYTES, MAX_REPORT_BYTES, check_result
from ds4ci.log import Logger, as_logger
from ds4ci.options.config import CheckSpec
from ds4ci.options.policy import CREDENTIAL_VARIABLES
from ds4ci.options.table import get as option
from ds4ci.records import CheckResult
from ds4ci.supervisor import resolve

__all__ = ["LOG_TAIL_BYTES", "RECORDS", "check_env", "run_check", "run_checks", "run_step", "slug"]
RECORDS = "checks.json"
KILL_GRACE_S = 5.0
DEFAULT_LOG_CAP_BYTES = int(option("gate", "log_cap_mib").default) << 20

Progress = Callable[[str], None]


# --- running ------------------------------------------------------------------------------------


def slug(name: str) -> str:
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")[:60]
    return text or "check"


def check_env() -> dict[str, str]:
    """The inherited environment minus credentials: checks build and run pull-request code."""
    return {k: v for k, v in os.environ.items() if k not in CREDENTIAL_VARIABLES}  # a check runs PR code


def _run_group(
    command: str, cwd: Path | None, log: CappedLog, timeout_s: float, sup: supervisor.Supervisor, view: supervisor.View
) -> supervisor.RunResult:
    """Run ``bash -c command`` (in the sandbox ``view``) with stdout and stderr in ``log``; all it started is swept."""
    try:
        return sup.run(
            ["bash", "-c", command],
            timeout_s,
            cwd=cwd,
            env=check_env(),
            stdout=log.write_fd,
            stderr=supervisor.STDOUT,
            grace_s=KILL_GRACE_S,
            view=view,
        )
    finally:
        log.close()


Stamp = tuple[int, int, int, int]


def _open_report(path: Path, cwd: Path, trees: Sequence[Path]) -> tuple[BinaryIO | None, str | None]:
    """The report the check wrote (PR output), opened through the resolver: its folder beneath the trees with no
    link followed, the name itself no link, a regular file (never a FIFO or a device). (file, None), or
    (None, why not); (None, None) when there is none."""
    folder = path.absolute().parent
    try:
        where = resolve.open_path("the report's folder", folder, (*trees, cwd, folder), missing_ok=True)
    except resolve.PathRefused as exc:
        return None, str(exc)
    if where is None:
        return None, None
    try:
        return confined.open_regular(where.fd, path.name), None
    except confined.ConfinedError as exc:
        return None, None if exc.cause is not None and exc.cause.errno == errno.ENOENT else str(exc)
    finally:
        where.close()


def _stamp(fh: BinaryIO) -> Stamp:
    st = os.fstat(fh.fileno())
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _report_stamp(path: Path | None, cwd: Path, trees: Sequence[Path]) -> Stamp | None:
    if path is None:
        return None
    fh, _ = _open_report(path, cwd, trees)
    if fh is None:
        return None
    with fh:
        return _stamp(fh)


def _read_report(
    path: Path | None, cwd: Path, stamp_before: Stamp | None, trees: Sequence[Path],
) -> tuple[bytes | None, str | None]:
    """The report's bytes, or None if this run did not (re)write it (a stale file proves nothing), with why
    a file that is there was not read (a link, a FIFO, a folder that leads out of the checkout)."""
    if path is None:
        return None, None
    fh, why = _open_report(path, cwd, trees)
    if fh is None:
        return None, why
    with fh:
        if _stamp(fh) == stamp_before:
            return None, None
        return fh.read(MAX_REPORT_BYTES + 1), None


def run_step(
    spec: CheckSpec, log: Path, sup: supervisor.Supervisor | None = None, progress: Progress | None = None,
    log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES, view: supervisor.View | None = None, trees: Sequence[Path] = (),
) -> dict[str, Any]:
    """Run one command (in ``view``, default ``views.check_view`` with ``trees``: the checkout and every PR-writable
    folder); its sealed run record. The log is ``log``; a fresh report is copied beside it."""
    cwd = (spec.cwd or Path.cwd()).absolute()
    report_before = _report_stamp(spec.report, cwd, trees)
    record: dict[str, Any] = {
        "name": spec.name, "parser": spec.parser, "command": spec.command, "timeout_s": spec.timeout_s,
        "log": log.name, "report": None, "start_error": None, "timed_out": False, "abandoned": False,
        "exit_code": None, "duration_s": 0.0,
    }
    capped = CappedLog(log, log_cap_bytes)
    try:
        run = _run_group(
            spec.command, spec.cwd, capped, spec.timeout_s, sup or supervisor.default(), view or views.check_view(spec, trees)
        )
    except (OSError, supervisor.SupervisorError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        record["start_error"] = f"could not start the command in {spec.cwd or Path.cwd()}: {why}"
    else:
        record.update({
            "timed_out": run.timed_out, "abandoned": run.abandoned, "duration_s": round(run.duration_s, 3),
            "exit_code": None if run.timed_out else run.returncode,
        })
        report, refused = _read_report(spec.report, cwd, report_before, trees)
        if refused is not None and progress is not None:
            progress(f"check {spec.name}: its report was not read: {refused}")
        if report is not None:
            record["report"] = log.name.removesuffix(".log") + ".report"
            (log.parent / record["report"]).write_bytes(report)
        if progress is not None and run.killed:
            more = f"; and {len(run.killed) - 5} more" if len(run.killed) > 5 else ""
            shown = "; ".join(str(k) for k in run.killed[:5]) + more
            progress(f"check {spec.name}: killed {len(run.killed)} process(es) it left running: {shown}")
    log.touch()  # a command that could not start leaves an empty log: the record names it either way
    return record


def run_check(
    spec: CheckSpec, log: Path, sup: supervisor.Supervisor | None = None, progress: Progress | None = None,
    log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
) -> CheckResult:
    """Run one check; the schema's ``check`` object, judged from what was sealed (the record is not kept)."""
    return check_result(run_step(spec, log, sup, progress, log_cap_bytes), log.parent, f"check {spec.name}")


def run_checks(
    specs: Sequence[CheckSpec],
    log_dir: Path,
    progress: Progress | Logger | None = None,
    sup: supervisor.Supervisor | None = None,
    log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
    trees: Sequence[Path] = (),
) -> list[CheckResult]:
    """Run every check in order (each is judged on its own); logs and ``checks.json`` go to ``log_dir``;
    ``trees``: the checkout and every PR-writable folder (``views.pr_trees``).

    ``sup`` is the supervisor to run them under (default: the process-wide one), whose
    ``containment`` says what held. ``checks.json`` is rewritten after each check, so an
    interrupted run keeps the records of the checks that finished.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log = as_logger(progress)
    results = []
    records: list[dict[str, Any]] = []
    used: set[str] = set()
    for spec in specs:
        name = slug(spec.name)
        unique, n = name, 2
        while unique in used:  # distinct names can share a slug; logs must not overwrite each other
            unique, n = f"{name}-{n}", n + 1
        used.add(unique)
        with log.group(f"check {spec.name}"):
            log(f"check {spec.name}: running ({spec.parser}, timeout {spec.timeout_s:g} s)")
            records.append(run_step(spec, log_dir / f"check-{unique}.log", sup, log, log_cap_bytes, trees=trees))
            _write_records(log_dir / RECORDS, records)
            result = check_result(records[-1], log_dir, f"check {spec.name}")
            log(f"check {spec.name}: {result['status']}: {result['summary']} ({result['duration_s']:.1f} s)")
        results.append(result)
    return results


def _write_records(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(records, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
