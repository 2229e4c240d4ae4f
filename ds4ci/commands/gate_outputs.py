"""What a gate run leaves besides its evidence: the job summary, and a word about where evidence lands.

- Under GitHub Actions (``GITHUB_STEP_SUMMARY`` set) the run's summary (the same Markdown as
  ``ds4ci report --format summary``) is appended to the job summary.
- The evidence folder defaults to ``./ds4ci-evidence``. Inside a git checkout it must be ignored,
  or ``git add -A`` would commit gigabytes of logs: a folder of the gate's own ignores itself (a
  ``.gitignore`` holding ``*``, ``evidence.store.ignore_itself``); for any other folder the gate
  warns before it runs unless git ignores it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ds4ci.evidence import store
from ds4ci.log import Logger
from ds4ci.records import Results
from ds4ci.textsafe import neutralise

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def write_step_summary(doc: Results, log: Logger) -> None:
    """Append the run's summary to ``$GITHUB_STEP_SUMMARY`` when it is set; a failure is a warning, never the verdict."""
    target = os.environ.get(STEP_SUMMARY)
    if not target:
        return
    from ds4ci.report import render
    from ds4ci.report.docview import view_of

    try:
        body, _ = render.render([view_of(doc)], kind="summary")
        with Path(target).open("a", encoding="utf-8") as fh:
            fh.write(neutralise(body if body.endswith("\n") else body + "\n"))  # it quotes server text
    except Exception as exc:  # the summary is a convenience: it must not change the verdict
        log.warning(f"could not write the job summary to ${STEP_SUMMARY} ({target}): {type(exc).__name__}: {exc}")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def evidence_not_ignored(evidence_dir: Path) -> Path | None:
    """The git work tree that holds ``evidence_dir`` without ignoring it; None when outside one, ignored, or no git."""
    from ds4ci.runner.revisions import safe_args, safe_env  # git never runs with the checkout's programs

    git = shutil.which("git")
    if git is None:
        return None
    start = _existing_ancestor(evidence_dir.absolute())
    start = start if start.is_dir() else start.parent

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([git, *safe_args(), "-C", str(start), *args], capture_output=True, text=True, timeout=30,
                              env=safe_env(), stdin=subprocess.DEVNULL, check=False)

    try:
        top = run("rev-parse", "--show-toplevel")
        if top.returncode != 0 or not top.stdout.strip():
            return None
        ignored = run("check-ignore", "-q", "--no-index", str(evidence_dir.absolute() / "runs"))
    except (OSError, subprocess.SubprocessError):
        return None
    return None if ignored.returncode == 0 else Path(top.stdout.strip())


def warn_evidence_in_checkout(evidence_dir: Path, log: Logger) -> None:
    if store.ours_only(evidence_dir):  # the gate's own folder: it gets a .gitignore holding "*"
        return
    checkout = evidence_not_ignored(evidence_dir)
    if checkout is not None:
        log.warning(
            f"the evidence folder {evidence_dir} is inside the git checkout {checkout} and not ignored: "
            f"`git add -A` would commit it; add it to .gitignore (`ds4ci init` does), or pass --evidence-dir "
            "outside the checkout (the action uses $RUNNER_TEMP/ds4ci-evidence)"
        )
