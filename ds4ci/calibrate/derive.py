"""``calibration.json`` as a pure function of a record's sealed files: ``derive(record) -> dict``.

``ds4ci calibrate`` writes exactly what ``derive`` returns for its sealed record, and ``ds4ci verify``
derives it again and compares. Each field comes from one sealed file:

- ``gates/<name>.tar.gz``: each gate's own evidence bundle, verified (every verdict re-derived from its
  logs by ``ds4ci.evidence.verify``): the verdict per width, the first differing position, the gate's
  time, the runner, the binary's SHA-256 and the tiny config's pins (of the unchanged build's gate);
- ``catalogue.toml``: the mutants, what each changes, where it cannot act (``equivalent_at``), its digest;
- ``inputs.json``: what only the calibrating run saw: the GPU and driver as observed, the engine's
  commit and source folder, the build command and times, when it ran, the ds4ci that ran it;
- ``manifest.json``: its SHA-256.

A width is caught when its verdict is not pass. A mutant counts as caught when every width where it can
act caught it; mutants equivalent at every width are reported, not counted; a mutant that did not build,
or whose gate reached no verdict, is named as not judged, neither caught nor missed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ds4ci.calibrate.catalogue import CONTROL, CatalogueError, Mutant, parse_catalogue
from ds4ci.evidence.citation import pins_of
from ds4ci.evidence.verify import verify_path
from ds4ci.judging import confined, strictjson
from ds4ci.judging.verdict import FAIL

SCHEMA = "ds4ci/calibration/v1"
INPUTS = "inputs.json"
CATALOGUE = "catalogue.toml"
CALIBRATION = "calibration.json"
GATES = "gates"
MAX_BYTES = 64 << 20


class DeriveError(Exception):
    """Sealed files from which no calibration can be derived: the message says which and why."""


def read_json(root: Path, rel: str) -> Any:
    try:
        return strictjson.loads(confined.read_bytes(root, rel, MAX_BYTES), rel)
    except (confined.ConfinedError, ValueError) as exc:
        raise DeriveError(f"{rel}: {exc}") from None


def gate_results(root: Path, name: str) -> dict[str, Any] | None:
    """The verified results of one gate's sealed bundle (None: that gate left no bundle)."""
    rel = f"{GATES}/{name}.tar.gz"
    if not (root / rel).is_file():
        return None
    found = verify_path(root / rel, None)
    if not found.intact or found.recorded is None:
        raise DeriveError(f"{rel} does not verify: " + "; ".join(found.problems[:5]))
    return dict(found.recorded)


def _width(mutant: Mutant | None, width: dict[str, Any]) -> dict[str, Any]:
    firsts = [p["mismatch"]["position"] for p in width["prompts"] if isinstance(p.get("mismatch"), dict)]
    q = int(width["q"])
    return {"q": q, "verdict": width["verdict"], "caught": width["verdict"] != "pass",
            "acts": True if mutant is None else mutant.acts_at(q), "first_difference": min(firsts) if firsts else None}


def _gate_row(doc: dict[str, Any] | None, ran: dict[str, Any], mutant: Mutant | None) -> dict[str, Any]:
    if doc is None:
        why = ran.get("error") or f"the gate left no evidence bundle (exit {ran.get('exit_code')})"
        return {"verdict": "no verdict", "why": str(why), "widths": [], "gate_s": None, "server_bin_sha256": None}
    server = (doc["identities"] or {}).get("server_bin") or {}
    return {"verdict": doc["verdict"], "why": "; ".join(str(r) for r in doc["reasons"][:2]),
            "widths": [_width(mutant, w) for w in doc["widths"]], "gate_s": (doc.get("timings") or {}).get("total_s"),
            "server_bin_sha256": server.get("sha256")}


def _repeats(doc: dict[str, Any] | None) -> Any:
    return (doc.get("settings") or {}).get("repeats") if doc is not None else None


def _mutant_row(root: Path, mutant: Mutant, ran: dict[str, Any], widths: list[int], repeats: Any) -> dict[str, Any]:
    doc = gate_results(root, mutant.name)
    row = {"name": mutant.name, "summary": mutant.summary, "equivalent": mutant.equivalent,
           **_gate_row(doc, ran, mutant)}
    own = _repeats(doc)
    if isinstance(own, int) and isinstance(repeats, int) and own != repeats:
        # Fewer repeats send a prefix of the requests of more (each prompt once per round, the rounds in order, a
        # fresh server per arm): a catch stands for the runner's gate, a miss may not. Said only where it differs.
        row["repeats"] = own
        if own > repeats:  # a catch in a later round would not be the runner's gate's: not judged
            row.update(widths=[], why=f"gated with {own} repeats, more than the unchanged build's {repeats}: its "
                       "catches need not be the runner's gate's")
        for width in row["widths"]:  # only a divergence stands: fewer requests may leave a coverage minimum unmet
            width["caught"] = width["verdict"] == FAIL
    acting = [w for w in row["widths"] if w["acts"]]
    row["acts"] = any(mutant.acts_at(q) for q in widths)
    row["caught"] = row["acts"] and bool(row["widths"]) and all(w["caught"] for w in acting)
    row["missed_at"] = [w["q"] for w in acting if not w["caught"]]
    return row


def summary_line(caught: int, acting: int, unjudged: int = 0, fewer_repeats: int = 0) -> str:
    """The words a report cites; mutants that could not be judged are named as such, never counted as caught, and
    a count made with fewer repeats than the runner's gate says it is a lower bound."""
    line = f"planted faults caught: {caught} of {acting} at every width where they can act"
    line += f" ({unjudged} more not judged: not built, or the gate reached no verdict)" if unjudged else ""
    return line + (f"; {fewer_repeats} mutant(s) gated with fewer repeats than the unchanged build's, so at least "
                   "that many caught" if fewer_repeats else "")


def derive(root: Path) -> dict[str, Any]:
    inputs = read_json(root, INPUTS)
    if not isinstance(inputs, dict) or not isinstance(inputs.get("gates"), dict):
        raise DeriveError(f"{INPUTS}: expected an object with the gates that ran")
    try:
        catalogue = parse_catalogue(confined.read_bytes(root, CATALOGUE, MAX_BYTES), Path(CATALOGUE))
    except (confined.ConfinedError, CatalogueError) as exc:
        raise DeriveError(f"{CATALOGUE}: {exc}") from None
    control_doc = gate_results(root, CONTROL)
    if control_doc is None:
        raise DeriveError(f"{GATES}/{CONTROL}.tar.gz: the unchanged build's gate left no bundle")
    control = _gate_row(control_doc, inputs["gates"].get(CONTROL, {}), None)
    reasons: list[str] = []
    rows: list[dict[str, Any]] = []
    if control["verdict"] != "pass":
        reasons.append(f"the unchanged build did not pass the gate (verdict {control['verdict']}: {control['why']}); "
                       "no mutant was judged, so the record measures nothing")
    else:
        widths = [w["q"] for w in control["widths"]]
        rows = [_mutant_row(root, m, inputs["gates"].get(m.name, {}), widths, _repeats(control_doc))
                for m in catalogue.mutants if m.name in inputs["gates"]]
    acting = [r for r in rows if r["acts"] and r["widths"]]
    unjudged = [r["name"] for r in rows if r["acts"] and not r["widths"]]
    caught = sum(1 for r in acting if r["caught"])
    fewer = [r["name"] for r in acting if "repeats" in r]
    manifest = hashlib.sha256(confined.read_bytes(root, "manifest.json", MAX_BYTES)).hexdigest()
    summary: dict[str, Any] = {"caught": caught, "acting": len(acting), "judged": len(rows), "unjudged": unjudged,
                               "line": summary_line(caught, len(acting), len(unjudged), len(fewer)) if not reasons
                               else reasons[0]}
    if fewer:  # absent otherwise: a record written before this key existed derives as it did
        summary["fewer_repeats"] = fewer
    return {
        "schema": SCHEMA, "verdict": "pass" if not reasons else "fail", "reasons": reasons,
        "runner": control_doc["runner"]["name"], "gpu": inputs.get("gpu"), "engine": inputs.get("engine"),
        "ds4ci_version": inputs.get("ds4ci_version"), "started": inputs.get("started"), "finished": inputs.get("finished"),
        "catalogue": {"sha256": catalogue.sha256, "repository": catalogue.repository, "written": catalogue.written,
                      "mutants": len(catalogue.mutants), "path": inputs.get("catalogue_path")},
        "pins": pins_of(control_doc), "control": control, "mutants": rows,
        "summary": summary,
        "builds": inputs.get("builds"), "manifest_sha256": manifest,
    }
