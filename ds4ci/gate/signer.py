"""Whose key signs this run, recorded (``run.json`` ``signing``) and shown; a job's own key refused unless allowed.

- ``service``: the gate service ran this gate (``--service-state``) with its own key, which no job's
  user can read;
- ``job-key``: a gate in a GitHub Actions job signs with a key the job's own user can read. Every
  step of every job on that runner (a workflow a pull request adds included) can read it too, so
  this is refused (exit 2) unless the trusted config says ``signing = "job-key"`` on purpose;
- ``local``: outside GitHub Actions and outside the service (a maintainer's own machine);
- None: nothing signs.

Under GitHub Actions a readable key is a job key whatever else is said: the service's gate runs
without ``GITHUB_ACTIONS`` (``ds4ci.service.job.gate_env``), so ``--service-state`` cannot make a
job's key pass for the service's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ds4ci.errors import UsageError
from ds4ci.options.config import GateConfig, under_actions
from ds4ci.options.protected import Protected
from ds4ci.records import Signing

SERVICE: Final = "service"
JOB_KEY: Final = "job-key"
LOCAL: Final = "local"


@dataclass(frozen=True)
class Safeguards:
    """What a run keeps of its key: the folders no input file may resolve into when it is hashed, whose key
    signs once the run is sealed (recorded in ``run.json``), and the public keys of this runner."""

    guard: Protected | None = None
    signing: Signing | None = None
    keys: tuple[str, ...] = ()  # this runner's public keys (the signing key's, the trusted config's): what a
    # calibration record the gate cites must be signed by


UNGUARDED: Final = Safeguards()


def readable_by_this_user(key: Path) -> bool:
    try:
        return os.access(key, os.R_OK) or key.stat().st_uid == os.getuid()
    except OSError:
        return False


def signer(cfg: GateConfig, key: Path | None) -> Signing | None:
    """What signs this run; UsageError for a job's own key under Actions without ``signing = "job-key"``."""
    if key is None:
        return None
    if under_actions() and readable_by_this_user(key):
        if cfg.signing != JOB_KEY:
            raise UsageError(
                f"the signing key {key} is readable by this job's user, so every step of every job on this runner "
                "can read it too (a workflow a pull request adds included); hold it in the gate service instead "
                f"(`sudo ds4ci service install --key-from {key} ...`, then the action's service-socket; "
                f"docs/service.md), or set signing = \"job-key\" in runner {cfg.runner}'s table of the trusted "
                "config to sign with it on purpose")
        return JOB_KEY
    return SERVICE if cfg.service_state is not None else LOCAL
