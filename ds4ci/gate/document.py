"""The results document a gate run starts from, and the inputs it seals: what run.py fills in."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from ds4ci import __version__
from ds4ci.errors import EXIT_ERROR, NoVerdictError
from ds4ci.evidence import results
from ds4ci.fileio import NotOpened, open_regular
from ds4ci.gate import settings
from ds4ci.judging.verdict import NOT_RUN
from ds4ci.options import policy
from ds4ci.options.config import GateConfig
from ds4ci.records import Containment, FileIdentity, Identities, Results, RunnerRole


def initial_results(cfg: GateConfig, started_at: str) -> Results:
    """A run that has done nothing yet: no verdict, every field present (so any exit leaves a valid file)."""
    return {
        "schema": results.SCHEMA_ID,
        "schema_version": results.SCHEMA_VERSION,
        "ds4ci_version": __version__,
        "runner": {
            # options/config.py accepts no other role; a Literal-typed GateConfig.role would make the cast go
            "name": cfg.runner, "role": cast(RunnerRole, cfg.role), "negative_control_for": cfg.negative_control_for,
        },
        "verdict": NOT_RUN,
        "reasons": [],
        "exit_code": EXIT_ERROR,
        "started_at": started_at,
        "finished_at": started_at,
        "timings": {"total_s": 0.0, "hashing_s": 0.0, "servers": []},
        "identities": {"server_bin": None, "target": None, "draft": None, "prompts": []},
        "settings": settings.settings_json(cfg),
        "policy": {
            "common": policy.common_policy(cfg.mmvq_max_ncols, cfg.env_prefixes),
            "removed": [], "arms": {}, "difference": [],
        },
        "provenance": {"inherited": policy.provenance(os.environ)},
        "warnings": list(cfg.notes),
        "server": {"name": None, "version": None},
        "target_only": {"verdict": NOT_RUN, "reasons": [], "deterministic": False, "prompts": [], "server_log": None},
        "widths": [],
        "evidence": {"dir": "", "manifest_sha256": None, "diagnostics": None},
        "fingerprint": None,
        "revisions": None,
        "checks": [],
        "build": None,
        "reproduce": settings.reproduce_command(cfg),
    }


def read_verified_prompt(path: Path, sha256: str, trees: Sequence[Path] = ()) -> str:
    """The prompt text sent to the servers: exactly the bytes whose SHA-256 was just verified (opened as it was
    hashed: inside ``trees``, the folders pull-request code wrote, no link followed)."""
    try:
        fd, _ = open_regular(path, trees)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
    except (OSError, NotOpened) as exc:
        raise NoVerdictError(f"prompt file {path} became unreadable after it was verified: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise NoVerdictError(f"prompt file {path} changed after its SHA-256 was verified; refusing to send it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoVerdictError(f"prompt file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def inputs(identities: Identities) -> list[FileIdentity]:
    """Every input file's identity for the manifest (none before hashing ran)."""
    singles = [i for i in (identities["server_bin"], identities["target"], identities["draft"]) if i is not None]
    return [*singles, *identities["prompts"]]


def containment() -> Containment | None:
    """Which containment held for every process this run started (None if it started none)."""
    from ds4ci import supervisor

    return supervisor.default().containment
