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

from ds4ci.gate import views
from ds4ci.gate.checks import run_check
from ds4ci.log import Logger, as_logger
from ds4ci.options.config import BuildSpec, CheckSpec
from ds4ci.records import BuildRecord, StepStatus

Progress = Callable[[str], None]


def run_build(spec: BuildSpec, log_dir: Path, progress: Progress | Logger) -> BuildRecord:
    """Run the build in its own log group; the schema's ``build`` object (its log is ``log_dir/build.log``)."""
    log = as_logger(progress)
    with log.group("build"):
        return _build(spec, log_dir, log)


def _build(spec: BuildSpec, log_dir: Path, progress: Logger) -> BuildRecord:
    log_dir.mkdir(parents=True, exist_ok=True)
    progress(f"build: running `{spec.command}` in {spec.cwd or Path.cwd()} (timeout {spec.timeout_s:g} s)")
    check = run_check(
        CheckSpec("build", spec.command, "build-progress", None, spec.timeout_s, spec.cwd), log_dir / "build.log",
        progress=progress, view=views.build_view(spec),
    )
    code = check["exit_code"]
    status: StepStatus
    if code is None:  # timed out, could not start, or left something unkillable: no verdict
        status, summary = "error", check["summary"]
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
