"""What ``ds4ci publish`` may rest a status on: results re-derived from their evidence bundles.

Every input is a bundle (a promoted attempt directory or a ``.tar.gz`` of one) or a results.json
whose bundle is found at the evidence location recorded in it (the file must then be identical to
the bundle's own). Each bundle is verified by ``ds4ci verify``'s code. A bundle that does not
verify is published as ``error`` ("evidence does not verify") and shows no pass. A results.json
with no bundle is refused unless ``--unverified``; an unverified result is labelled as such in the
comment and never sets a status.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci import results
from ds4ci.commands.verify import verify_one
from ds4ci.errors import EXIT_ERROR, UsageError
from ds4ci.evidence import RESULTS
from ds4ci.verdict import ERROR, PASS

UNVERIFIED = "unverified: no evidence bundle was found for this result, so nothing was re-derived and no status is set"


@dataclass(frozen=True)
class Published:
    """One runner's document as it may be published, and whether it may set a status."""

    doc: dict[str, Any]
    may_set_status: bool


def is_bundle(path: Path) -> bool:
    return path.is_dir() or path.name.endswith(".tar.gz")


def _no_pass(verdict: str) -> str:
    return ERROR if verdict == PASS else verdict


def not_verified(doc: dict[str, Any], problems: Sequence[str]) -> dict[str, Any]:
    """The document as published when its evidence does not verify: an error that shows no pass."""
    out = copy.deepcopy(doc)
    reason = "evidence does not verify: " + "; ".join(problems[:5])
    out.update(verdict=ERROR, exit_code=EXIT_ERROR, reasons=[reason[:4000]])
    out["target_only"]["verdict"] = _no_pass(out["target_only"]["verdict"])
    for width in out["widths"]:
        width["verdict"] = _no_pass(width["verdict"])
        for cell in width["prompts"]:
            cell["verdict"] = _no_pass(cell["verdict"])
    return out


def from_bundle(path: Path) -> Published:
    found = verify_one(path, None)
    if found.recorded is None:
        raise UsageError(f"{path}: not a readable evidence bundle ({'; '.join(found.problems[:3])})")
    if found.problems:
        return Published(not_verified(found.recorded, found.problems), may_set_status=True)
    return Published(found.recorded, may_set_status=True)


def from_results(path: Path, unverified: bool) -> Published:
    doc = results.load(path)
    bundle = Path(doc["evidence"]["dir"]) if doc["evidence"]["dir"] else None
    if bundle is not None and (bundle / RESULTS).is_file():
        if (bundle / RESULTS).read_bytes() != path.read_bytes():
            raise UsageError(f"{path} differs from its evidence bundle's own {bundle / RESULTS}; refusing it")
        return from_bundle(bundle)
    if not unverified:
        raise UsageError(
            f"{path}: its evidence bundle ({bundle or 'none recorded'}) is not here; publish the bundle itself "
            "(the attempt directory or the gate's --bundle-out .tar.gz), or pass --unverified for a comment "
            "labelled unverified that sets no status"
        )
    out = copy.deepcopy(doc)
    out["warnings"] = [UNVERIFIED, *out.get("warnings", [])]
    return Published(out, may_set_status=False)


def load(paths: Sequence[Path], unverified: bool) -> list[Published]:
    return [from_bundle(p) if is_bundle(p) else from_results(p, unverified) for p in paths]
