"""What a gate seals about its runner's latest calibration: ``citation.json`` (``ds4ci.evidence.citation``).

The gate runs this on its runner, before any pull-request process starts, when the trusted config names
the runner's records (``gate.calibrations``, a folder outside the checkout). The latest record there that
claims this runner and this run's tiny models, prompts and settings (``ds4ci.calibrate.latest``) is verified
as ``ds4ci verify`` verifies it: its files against its manifest, ``calibration.json`` derived again from every
gate's own bundle, ``attestation.json`` signed by this runner's key (the key the gate signs with, and the
``public_key`` the trusted config names for this runner). A record that does not verify is sealed with the
reasons; none at all, as none. Records of other runners are named, never cited.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ds4ci.calibrate.latest import latest_record
from ds4ci.calibrate.record import verify_record


def _cited(doc: Mapping[str, Any]) -> dict[str, Any]:
    summary = doc.get("summary") or {}
    return {"sha256": doc.get("manifest_sha256"), "runner": doc.get("runner"), "finished": doc.get("finished"),
            "engine_commit": (doc.get("engine") or {}).get("commit"), "caught": summary.get("caught"),
            "acting": summary.get("acting"), "summary": summary.get("line"), "verdict": doc.get("verdict"),
            "reasons": list(doc.get("reasons") or [])[:5], "pins": doc.get("pins")}


def _overlap(folder: Path, trees: Sequence[Path]) -> tuple[Path, str] | None:
    """The first pull-request tree ``folder`` lies in or holds (resolved), and which of the two; None: neither."""
    real = Path(os.path.realpath(folder))
    for tree in trees:
        r = Path(os.path.realpath(tree))
        if r == real or r in real.parents:
            return tree, "lies in"
        if real in r.parents:
            return tree, "holds"
    return None


def citation(folder: Path, run: Mapping[str, Any], keys: Sequence[str], pr_trees: Sequence[Path] = ()) -> dict[str, Any]:
    """The citation to seal for ``run`` (a results document's runner, identities and settings); ``pr_trees``: the
    folders pull-request code writes, where no record is read."""
    runner = run["runner"]["name"]
    out: dict[str, Any] = {"folder": str(folder), "runner": runner, "record": None, "problems": [], "others": [],
                           "calibration": None}
    if not folder.is_absolute() or not folder.is_dir():
        out["problems"] = [f"gate.calibrations = {folder}: expected an absolute path of a folder of calibration "
                           "records (`ds4ci calibrate --out`), found none"]
        return out
    found = _overlap(folder, pr_trees)
    if found is not None:
        out["problems"] = [f"gate.calibrations = {folder} {found[1]} {found[0]}, which pull-request code writes: keep "
                           "the runner's records in a folder of their own, apart from it"]
        return out
    path, out["others"] = latest_record(folder, run, skip=pr_trees)
    if path is None:
        return out
    out["record"] = str(path)
    if not keys:
        out["problems"] = [f"no key of runner {runner} to check its signature with (the gate signs with no key and "
                           f"the trusted config names no public_key for runner {runner})"]
        return out
    check = verify_record(path, {runner: tuple(keys)})
    if not check.intact or check.doc is None:
        out["problems"] = ["it does not verify: " + "; ".join(check.problems[:3] or ["nothing derived"])]
        return out
    if check.doc.get("runner") != runner:
        out["problems"] = [f"it calibrated runner {check.doc.get('runner')}, not {runner}"]
        return out
    out["calibration"] = _cited(check.doc)
    return out
