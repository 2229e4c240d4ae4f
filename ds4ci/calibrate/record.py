"""The calibration record: a sealed folder (``OUT/record``), signed like a gate bundle, verified by re-derivation.

Written in this order: ``inputs.json``, ``catalogue.toml`` (the catalogue's bytes) and ``gates/<name>.tar.gz``
(each gate's own bundle); then ``manifest.json`` over them (``ds4ci.evidence.store``); then
``calibration.json``, exactly what ``derive`` returns for the sealed files; then, with a key,
``attestation.json`` (DSSE, ``ds4ci.evidence.attestation``) whose subject is the manifest's SHA-256 and whose
predicate repeats the verdict, the runner, the engine commit, the pins' and the catalogue's digests.
``verify_record`` checks the files against the manifest, derives ``calibration.json`` again and compares.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.calibrate.derive import CALIBRATION, CATALOGUE, GATES, INPUTS, DeriveError, derive, read_json
from ds4ci.evidence import attestation
from ds4ci.evidence.differ import first_difference
from ds4ci.evidence.store import MANIFEST, build_manifest, write_json
from ds4ci.evidence.verify import check_files
from ds4ci.fileio import write_text_atomic
from ds4ci.judging import strictjson

PREDICATE_TYPE = "https://ds4ci.invalid/attestation/calibration/v1"
BESIDE = (MANIFEST, CALIBRATION, attestation.ATTESTATION)  # written after the manifest, outside it


def is_record(path: Path) -> bool:
    return path.is_dir() and (path / CALIBRATION).is_file() and (path / INPUTS).is_file()


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def statement(manifest_sha256: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": attestation.STATEMENT_TYPE,
        "subject": [{"name": MANIFEST, "digest": {"sha256": manifest_sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"runner": doc.get("runner"), "engine_commit": (doc.get("engine") or {}).get("commit"),
                      "verdict": doc.get("verdict"), "summary": (doc.get("summary") or {}).get("line"),
                      "pins_sha256": digest(doc.get("pins")), "catalogue_sha256": (doc.get("catalogue") or {}).get("sha256"),
                      "ds4ci_version": doc.get("ds4ci_version"), "signer": f"ds4ci {__version__}"},
    }


def seal(record: Path, inputs: dict[str, Any], catalogue_bytes: bytes, bundles: Mapping[str, Path],
         key: Path | None) -> dict[str, Any]:
    """Write and seal the record folder (new); the derived calibration document."""
    (record / GATES).mkdir(parents=True)
    write_json(record / INPUTS, inputs)
    (record / CATALOGUE).write_bytes(catalogue_bytes)
    for name, bundle in bundles.items():
        shutil.copyfile(bundle, record / GATES / f"{name}.tar.gz")
    write_json(record / MANIFEST, build_manifest(record, []))
    try:
        doc = derive(record)
    except DeriveError as exc:
        raise DeriveError(f"the record {record} derives nothing: {exc}") from None
    write_text_atomic(record / CALIBRATION, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if key is not None:
        attestation.sign_statement(record, key, statement(doc["manifest_sha256"], doc))
    return doc


@dataclass
class RecordCheck:
    path: str
    problems: list[str] = field(default_factory=list)
    doc: dict[str, Any] | None = None

    @property
    def intact(self) -> bool:
        return not self.problems and self.doc is not None

    @property
    def exit_code(self) -> int:
        if not self.intact:
            return 3
        return 0 if self.doc is not None and self.doc["verdict"] == "pass" else 1

    def summary(self) -> str:
        if not self.intact or self.doc is None:
            return f"{self.path}: calibration record does not verify: " + "; ".join(self.problems[:20] or ["nothing derived"])
        return f"{self.path}: calibration record intact and consistent; {self.doc['summary']['line']}"


def _signature(record: Path, doc: Mapping[str, Any], trusted: Mapping[str, Sequence[str]]) -> list[str]:
    runner = str(doc.get("runner"))
    lines = [*trusted.get(attestation.ANY_RUNNER, ()), *trusted.get(runner, ())]
    if not trusted:
        return []
    if not lines:
        return [f"not signed by a trusted key: the trusted config names runner keys, but none for runner {runner}"]
    who = f"runner {runner}'s key"
    payload, problems = attestation.signed_payload(record, lines, who)
    if payload is None:
        return problems
    try:
        claimed = strictjson.loads(payload, "the signed statement")
    except ValueError as exc:
        return [f"signed by {who}, but the statement cannot be read: {exc}"]
    return attestation.disagreements(claimed, statement(str(doc.get("manifest_sha256")), doc), who)


def verify_record(record: Path, trusted: Mapping[str, Sequence[str]] | None = None) -> RecordCheck:
    """Files against the manifest, ``calibration.json`` against its re-derivation, the signature with ``trusted`` keys."""
    found = RecordCheck(str(record))
    problems, manifest = check_files(record, BESIDE)
    found.problems += problems
    if manifest is None:
        return found
    try:
        recorded = read_json(record, CALIBRATION)
        derived = derive(record)
    except DeriveError as exc:
        found.problems.append(f"no calibration can be derived from the sealed files: {exc}")
        return found
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        found.problems.append(f"the sealed files have an unexpected shape ({type(exc).__name__}: {str(exc)[:200]})")
        return found
    difference = first_difference(recorded, derived)
    if difference is not None:
        found.problems.append(f"{CALIBRATION} differs from what its sealed files derive: {difference}")
    found.problems += _signature(record, derived, trusted or {})
    found.doc = derived
    return found
