"""``ds4ci bisect`` from start to end: the range, the plan, the scratch tree, the search, the document.

Everything that can be refused is refused before the first gate runs (exit 2): the config (loaded as the gate
loads it), the ends, the range, where the config sits. The plan (how many commits, about how many gate runs)
is said up front, and once the first step is done, how long the rest may take. SIGINT and SIGTERM end the
search with no verdict: the running gate is stopped and keeps the evidence of its attempt, every finished
step's bundle stays sealed, and the scratch tree goes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.bisect import history, scratch
from ds4ci.bisect.outcome import document
from ds4ci.bisect.search import RunStep, Search, bisect, expected_steps
from ds4ci.bisect.step import GateArgs, StepRunner
from ds4ci.errors import UsageError
from ds4ci.gate.interrupt import GateInterrupted, signals_raise
from ds4ci.log import Logger, human_seconds
from ds4ci.options import config
from ds4ci.records import BisectCommit, BisectResult, BisectStep


@dataclass(frozen=True)
class Request:
    repo: Path
    config_file: Path
    good: str | None = None
    bad: str | None = None
    base_ref: str | None = None
    runner: str | None = None
    widths: str | None = None
    evidence_dir: Path | None = None  # else the config's gate.evidence_dir
    config_base: Path | None = None  # the repository folder the config's relative paths start from (--config-base)


class Estimate:
    """Wraps a step runner: after the first step, says about how long the remaining steps take."""

    def __init__(self, run_step: RunStep, expected: int, log: Logger) -> None:
        self.run_step, self.expected, self.log, self.done = run_step, expected, log, 0

    def __call__(self, position: int, commit: BisectCommit) -> BisectStep:
        step = self.run_step(position, commit)
        self.done += 1
        if self.done == 1 and self.expected > 1:
            left = self.expected - 1
            self.log(f"bisect: the first step took {human_seconds(step['duration_s'])}: about {left} more "
                     f"(~{human_seconds(left * step['duration_s'])}), plus one per skipped commit")
        return step


def _config(request: Request) -> config.GateConfig:
    """The config as the gate loads it (refused now, before any work, when it cannot run); its evidence folder is
    resolved where the config is, and every step's bundle lands there."""
    overrides: dict[str, Any] = {"runner": request.runner} if request.runner is not None else {}
    if request.config_base is not None:
        overrides["config_base"] = request.config_base
    return config.load(request.config_file, overrides, check_files=False)


def _trusted_bytes(request: Request) -> bytes:
    """The config's bytes, read once before any step runs. Under GitHub Actions the gate has already run the pull
    request's build in the checkout, so a config inside it is the build's to rewrite: refused, the trusted copy
    outside it (gate.yml's, in $RUNNER_TEMP) is what every later step takes."""
    from ds4ci.fileio import NotOpened, checkout_holding, open_regular

    inside = checkout_holding(request.config_file.absolute().parent)
    if config.under_actions() and inside is not None:
        raise UsageError(f"--config {request.config_file} lies inside the checkout {inside}, which the gate's pull-"
                         "request build could write: under GitHub Actions bisect takes the trusted settings from "
                         "outside the checkout (gate.yml's copy in $RUNNER_TEMP) with --config-base naming the "
                         "checkout's folder their relative paths start from")
    try:
        fd, _ = open_regular(request.config_file)
    except NotOpened as exc:
        raise UsageError(f"--config: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def run(request: Request, log: Logger) -> BisectResult:
    if not request.config_file.is_file():
        raise UsageError(f"--config {request.config_file}: expected the gate's config file (ds4ci.toml), found none")
    data = _trusted_bytes(request)
    cfg = _config(request)
    evidence_dir = request.evidence_dir.absolute() if request.evidence_dir is not None else cfg.evidence_dir
    good, bad = history.ends(request.repo, request.good, request.bad, request.base_ref or cfg.base_ref)
    commits = history.first_parents(request.repo, good, bad)
    folder = scratch.config_folder(request.repo, request.config_file, request.config_base)
    expected = expected_steps(len(commits))
    log(f"bisect: {len(commits) - 1} first-parent commits after the good end {good[:12]} up to the bad end "
        f"{bad[:12]}: about {expected} gate runs (log2), plus one per skipped commit; evidence in {evidence_dir}")
    search = Search(commits)
    args = GateArgs(evidence_dir, cfg.runner, request.widths)
    try:
        with signals_raise(), scratch.ScratchTree(request.repo, data, folder) as tree:
            bisect(search, Estimate(StepRunner(tree, args, log), expected, log))
    except GateInterrupted as exc:
        search.verdict, search.first_bad, search.candidates = "no_verdict", None, ()
        search.reason = f"{exc} after {len(search.steps)} finished steps (their evidence is kept)"
    return document(search, cfg.runner, expected)
