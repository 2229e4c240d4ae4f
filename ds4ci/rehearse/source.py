"""The ds4ci the rehearsed workflows install: a local repository of a ds4ci source folder, and a wheelhouse.

The workflows check ds4ci out at ``DS4CI_REF`` and pip-install it from that checkout. The rehearsal serves that
repository from a source folder (the one this ds4ci runs from, when it is an editable install, or one named):
its files as they are now, uncommitted changes included, committed into a new repository. pip then installs
ds4ci's dependencies from a wheelhouse: one ``pip wheel`` builds (this needs the package index once) or one
given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ds4ci
from ds4ci.errors import NoVerdictError, UsageError

# What a checkout of ds4ci's repository must hold for the workflows: the package, its action and workflows.
PROJECT_FILES = ("pyproject.toml", "README.md", "action.yml", "ds4ci", "templates", ".github", "requirements")
_OWN_PROJECT = re.compile(r'^name = "ds4ci"$', re.MULTILINE)
_GIT_ID = {"GIT_AUTHOR_NAME": "ds4ci rehearse", "GIT_AUTHOR_EMAIL": "rehearse@ds4ci.invalid",
           "GIT_COMMITTER_NAME": "ds4ci rehearse", "GIT_COMMITTER_EMAIL": "rehearse@ds4ci.invalid"}


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS``'s output; a fixed author and committer (a rehearsal's commits are its own)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **_GIT_ID})
    if proc.returncode != 0:
        raise NoVerdictError(f"git {' '.join(args[:2])} in {repo} failed: {(proc.stderr.strip() or 'no message')[-300:]}")
    return proc.stdout.strip()


def is_source(folder: Path) -> bool:
    """Whether ``folder`` is a ds4ci source folder: ds4ci's pyproject.toml beside the package."""
    try:
        project = (folder / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(_OWN_PROJECT.search(project)) and (folder / "ds4ci" / "__init__.py").is_file()


def running_source() -> Path | None:
    """The source folder this ds4ci runs from (an editable install), or None (an installed wheel)."""
    folder = Path(ds4ci.__file__).resolve().parent.parent
    return folder if is_source(folder) else None


def source_folder(given: Path | None) -> Path:
    """The ds4ci source to serve: ``given``, else the one this ds4ci runs from; refused when neither is one."""
    if given is not None:
        if not is_source(given):
            raise UsageError(f"--ds4ci-source {given}: expected a ds4ci source folder (its pyproject.toml and "
                             "ds4ci/ package), found none there")
        return given.resolve()
    found = running_source()
    if found is None:
        raise UsageError("no ds4ci source to serve as the workflows' DS4CI_REF: this ds4ci is an installed "
                         f"package ({Path(ds4ci.__file__).parent}), not a source folder; give a checkout of ds4ci's "
                         "repository with --ds4ci-source DIR")
    return found


def copy_project(source: Path, dest: Path) -> Path:
    """The source's ds4ci (the package, its action, its workflows) copied into the new folder ``dest``."""
    dest.mkdir()
    for name in PROJECT_FILES:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def serve(source: Path, dest: Path) -> str:
    """A new repository at ``dest`` holding the source's files in one commit; that commit."""
    copy_project(source, dest)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"ds4ci from {source}")
    return git(dest, "rev-parse", "HEAD")


def build_wheelhouse(source: Path, out: Path) -> Path:
    """Wheels of ds4ci's dependencies and build backend, and the publishing job's hash-locked files, in ``out``.

    Needs the package index pip is configured with (PyPI or a mirror); raises NoVerdictError when it cannot."""
    out.mkdir(parents=True, exist_ok=True)
    steps = (
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out), str(source), "hatchling"],
        # The jobs that hold a write token install the hash-pinned lock: its exact files, as the index serves them.
        [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes", "--only-binary", ":all:",
         "--dest", str(out), "-r", str(source / "requirements" / "publish.txt")],
    )
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise NoVerdictError(f"cannot build the wheelhouse from the package index (`pip {step[3]}` exit "
                                 f"{proc.returncode}: {last}); on a machine without one, give --wheelhouse DIR")
    for wheel in out.glob("ds4ci-*.whl"):
        wheel.unlink()  # the workflows must install ds4ci from its own checkout, not from here
    return out
