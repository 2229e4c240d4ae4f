"""``[build]``: build the server under test, contained like every child, and judge the build.

The build runs the pull request's own build system, so it runs under the process supervisor with
the job's credentials removed (as an extra check does). Its exit code decides: 0 passes (the built
``server_bin`` is then hashed, recorded and started), anything else is a **fail** (the PR does not
build), a timeout or a process that survives SIGKILL is an **error** (no verdict). Ninja/make
``[N/M]`` progress lines give ``targets_built`` / ``targets_total`` for the comment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ds4ci.gate.cappedlog import log_was_cut
from ds4ci.gate.checks import DEFAULT_LOG_CAP_BYTES, run_check
from ds4ci.log import Logger, as_logger
from ds4ci.options.config import BuildSpec, CheckSpec
from ds4ci.records import BuildRecord, StepStatus

Progress = Callable[[str], None]


def run_build(
    spec: BuildSpec, log_dir: Path, progress: Progress | Logger, log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES
) -> BuildRecord:
    """Run the build in its own log group; the schema's ``build`` object (its log is ``log_dir/build.log``,
    cut at ``log_cap_bytes`` like a check's)."""
    log = as_logger(progress)
    with log.group("build"):
        return _build(spec, log_dir, log, log_cap_bytes)


def _build(spec: BuildSpec, log_dir: Path, progress: Logger, log_cap_bytes: int) -> BuildRecord:
    log_dir.mkdir(parents=True, exist_ok=True)
    progress(f"build: running `{spec.command}` in {spec.cwd or Path.cwd()} (timeout {spec.timeout_s:g} s)")
    check = run_check(
        CheckSpec("build", spec.command, "build-progress", None, spec.timeout_s, spec.cwd), log_dir / "build.log",
        progress=progress, log_cap_bytes=log_cap_bytes,
    )
    code = check["exit_code"]
    status: StepStatus
    if code is None or log_was_cut(log_dir / "build.log"):  # timed out, could not start, left something
        status, summary = "error", check["summary"]  # unkillable, or its log was cut at the cap: no verdict
    elif code == 0:
        status, summary = "pass", "built" + (f": {check['summary']}" if check["total"] is not None else "")
    else:
        status, summary = "fail", f"the build failed with exit code {code}" + (
            f" ({check['passed']}/{check['total']} targets built)" if check["total"] is not None else ""
        )
    progress(f"build: {status}: {summary} ({check['duration_s']:.1f} s)")
    return {
        "command": check["command"],
        "cwd": str(spec.cwd or Path.cwd()),
        "server_bin": str(spec.server_bin),
        "status": status,
        "exit_code": code,
        "duration_s": check["duration_s"],
        "targets_built": check["passed"],
        "targets_total": check["total"],
        "summary": summary,
        "log_tail": check["log_tail"],
    }
