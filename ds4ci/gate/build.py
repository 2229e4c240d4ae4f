"""``[build]``: build the server under test, contained like every child, and seal what happened.

The build runs the pull request's own build system, so it runs under the process supervisor with
the job's credentials removed (as an extra check does). Its log is ``build/build.log`` and what
happened (exit code, timeout, duration) is sealed in ``build/build.json``; the verdict comes from
those files through ``ds4ci.judging.steps.build_result`` (the code ``ds4ci verify`` uses): exit
code 0 passes (the built ``server_bin`` is then hashed, recorded and started), anything else is a
**fail** (the PR does not build), a timeout or a process that survives SIGKILL is an **error**.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ds4ci.gate import views
from ds4ci.gate.checks import DEFAULT_LOG_CAP_BYTES, run_step
from ds4ci.judging.steps import build_result
from ds4ci.log import Logger, as_logger
from ds4ci.options.config import BuildSpec, CheckSpec
from ds4ci.records import BuildRecord
from ds4ci.supervisor import View

Progress = Callable[[str], None]
RECORD = "build.json"


def run_build(
    spec: BuildSpec, log_dir: Path, progress: Progress | Logger, log_cap_bytes: int = DEFAULT_LOG_CAP_BYTES,
    source_dir: Path | None = None, trees: Sequence[Path] = (),
) -> BuildRecord:
    """Run the build in its own log group; the schema's ``build`` object (its log is ``log_dir/build.log``,
    cut at ``log_cap_bytes`` like a check's). The ``.git`` of its folder and of ``source_dir`` is read-only;
    ``trees``: the checkout and every PR-writable folder (``views.pr_trees``)."""
    log = as_logger(progress)
    with log.group("build"):
        return _build(spec, log_dir, log, log_cap_bytes, source_dir, trees)


def _build(
    spec: BuildSpec, log_dir: Path, progress: Logger, log_cap_bytes: int, source_dir: Path | None, trees: Sequence[Path],
) -> BuildRecord:
    log_dir.mkdir(parents=True, exist_ok=True)
    progress(f"build: running `{spec.command}` in {spec.cwd or Path.cwd()} (timeout {spec.timeout_s:g} s)")
    record = run_step(
        CheckSpec("build", spec.command, "build-progress", None, spec.timeout_s, spec.cwd), log_dir / "build.log",
        progress=progress, log_cap_bytes=log_cap_bytes, view=_view(spec, source_dir, trees),
    )
    for key in ("name", "parser", "report"):
        del record[key]
    record.update({"cwd": str(spec.cwd or Path.cwd()), "server_bin": str(spec.server_bin)})
    (log_dir / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    build = build_result(record, log_dir, "build")
    said = {"pass": f"pass: {build['summary']}", "fail": build["summary"]}.get(build["status"],
                                                                             f"no verdict: {build['summary']}")
    progress(f"build: {said} ({build['duration_s']:.1f} s)")
    return build


def _view(spec: BuildSpec, source_dir: Path | None, trees: Sequence[Path]) -> View:
    """``views.build_view``, with every ``.git`` in its writable folders read-only (``views.git_dirs``)."""
    view = views.build_view(spec, trees)
    return dataclasses.replace(view, ro=(*view.ro, *views.git_dirs(view.rw, source_dir)))
