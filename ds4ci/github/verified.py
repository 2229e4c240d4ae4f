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
from typing import Any, cast

from ds4ci.errors import EXIT_ERROR, UsageError
from ds4ci.evidence import results
from ds4ci.evidence.store import RESULTS
from ds4ci.evidence.verify import verify_path
from ds4ci.judging.verdict import ERROR, PASS
from ds4ci.records import Results
from ds4ci.report.sections import UNVERIFIED as UNVERIFIED_STATE

UNVERIFIED = (
    "unverified: no evidence bundle backs this result (for a fork's run: produced by a workflow the pull request "
    "controls), so nothing was re-derived; it sets no status and never replaces a verified section"
)


@dataclass(frozen=True)
class Published:
    """One runner's document as it may be published, and whether it may set a status."""

    doc: Results
    may_set_status: bool


def is_bundle(path: Path) -> bool:
    return path.is_dir() or path.name.endswith(".tar.gz")


def without_pass(doc: Results, instead: str) -> Results:
    """A copy in which no verdict reads pass (each becomes ``instead``): nothing shows a pass mark.

    ``instead`` may be the display-only state ``unverified``, which no results file holds: the
    one place where a published document leaves the record types, so it is written untyped.
    """
    out = copy.deepcopy(doc)

    def swap(record: object) -> None:
        fields = cast(dict[str, Any], record)
        fields["verdict"] = instead if fields["verdict"] == PASS else fields["verdict"]

    swap(out)
    swap(out["target_only"])
    for width in out["widths"]:
        swap(width)
        for cell in width["prompts"]:
            swap(cell)
    for check in out["checks"]:
        fields = cast(dict[str, Any], check)
        fields["status"] = instead if fields["status"] == PASS else fields["status"]
    return out


def not_verified(doc: Results, problems: Sequence[str]) -> Results:
    """The document as published when its evidence does not verify: an error that shows no pass."""
    out = without_pass(doc, ERROR)
    reason = "evidence does not verify: " + "; ".join(problems[:5])
    out["verdict"], out["exit_code"], out["reasons"] = ERROR, EXIT_ERROR, [reason[:4000]]
    return out


def from_bundle(path: Path, trusted: dict[str, tuple[str, ...]] | None = None) -> Published:
    """A bundle as published: verified (and its signature checked under ``trusted`` runner keys)."""
    found = verify_path(path, None, trusted)
    if found.recorded is None:
        raise UsageError(f"{path}: not a readable evidence bundle ({'; '.join(found.problems[:3])})")
    if found.problems:
        return Published(not_verified(found.recorded, found.problems), may_set_status=True)
    return Published(found.recorded, may_set_status=True)


def from_results(path: Path, unverified: bool, trusted: dict[str, tuple[str, ...]] | None = None) -> Published:
    doc = results.load(path)
    bundle = Path(doc["evidence"]["dir"]) if doc["evidence"]["dir"] else None
    if bundle is not None and (bundle / RESULTS).is_file():
        if (bundle / RESULTS).read_bytes() != path.read_bytes():
            raise UsageError(f"{path} differs from its evidence bundle's own {bundle / RESULTS}; refusing it")
        return from_bundle(bundle, trusted)
    if not unverified:
        raise UsageError(
            f"{path}: its evidence bundle ({bundle or 'none recorded'}) is not here; publish the bundle itself "
            "(the attempt directory or the gate's --bundle-out .tar.gz), or pass --unverified for a comment "
            "labelled unverified that sets no status"
        )
    out = without_pass(doc, UNVERIFIED_STATE)
    cast(dict[str, Any], out)["verdict"] = UNVERIFIED_STATE  # the section is labelled unverified whatever it claims
    out["warnings"] = [UNVERIFIED, *out.get("warnings", [])]
    return Published(out, may_set_status=False)


def load(paths: Sequence[Path], unverified: bool, trusted: dict[str, tuple[str, ...]] | None = None) -> list[Published]:
    """Every input, verified; ``trusted``: runner keys of the trusted config (``attestation.trusted_keys``)."""
    return [from_bundle(p, trusted) if is_bundle(p) else from_results(p, unverified, trusted) for p in paths]
