"""``results.json`` as a pure function of an attempt's sealed files: ``derive(attempt) -> Results``.

The gate writes exactly what ``derive`` returns for its sealed attempt, and ``ds4ci verify`` runs
it again on the bundle and compares the two documents, so no field of ``results.json`` can say
anything its sealed files do not. Each field comes from one sealed file (``docs/results.md``):

- ``attempt.json``: ds4ci version, start time, runner, settings, reproduce command, config notes;
- ``run.json``: what no other file can show, written by the gate just before sealing: run-level
  errors (a pin mismatch, an interrupt), the finish time, wall-clock timings, the containment
  that held, whose key signs (``signing``; absent in older evidence), where the evidence directory
  lives and the attempt's id;
- ``identities.json``, ``revisions.json``, ``preflight.json``, ``env/policy.json``,
  ``env/provenance.json``: copied as they are (a file that is absent was absent when sealed);
- ``servers/<key>/`` and ``requests/<key>/``: every verdict, through ``judging.judge``; where and when each
  arm ran (``arms``), through ``judging.placement``;
- ``checks/checks.json`` and ``build/build.json`` with the logs and reports they name: the
  checks and the build, through ``judging.steps``;
- ``revisions.json`` with ``settings.allow_dirty_tree``: a modified source tree makes a pass an error
  unless allowed (``judging.tree``);
- ``citation.json``: the calibration the gate found for its runner (``calibration``, through
  ``evidence.citation``; absent when no ``gate.calibrations`` was configured, and in older evidence);
- ``manifest.json``: its SHA-256 (``results.json`` itself is not in the manifest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, ResultsError
from ds4ci.evidence import citation, results
from ds4ci.evidence.store import FAILED, MANIFEST, RUNS
from ds4ci.judging import confined, judge, steps
from ds4ci.judging.placement import arm_placements
from ds4ci.judging.tree import judge_tree
from ds4ci.judging.verdict import ERROR, FAIL, NOT_RUN, PASS
from ds4ci.records import BuildRecord, CheckResult, ExitCode, Results, TargetOnlyResult, Verdict, WidthResult

ATTEMPT = "attempt.json"
RUN = "run.json"
IDENTITIES = "identities.json"
REVISIONS = "revisions.json"
PREFLIGHT = "preflight.json"
POLICY = "env/policy.json"
PROVENANCE = "env/provenance.json"
CHECKS = "checks/checks.json"
BUILD = "build/build.json"
EXIT_FOR_VERDICT: dict[Verdict, ExitCode] = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, ERROR: EXIT_ERROR, NOT_RUN: EXIT_ERROR}
MAX_REASONS = 200


class DeriveError(Exception):
    """Sealed files from which no results document can be derived (missing, malformed): never a verdict."""


def sealed_json(root: Path, rel: str, required: bool = True) -> Any:
    """One sealed JSON file, read strictly (confined to the bundle, size limit, no duplicate keys); None when absent
    and optional."""
    try:
        data = confined.read_bytes(root, rel, results.MAX_RESULTS_BYTES)
    except confined.ConfinedError as exc:
        if not required and not (root / rel).exists() and not (root / rel).is_symlink():
            return None
        raise DeriveError(str(exc) if (root / rel).exists() else f"{rel} is missing from the evidence") from exc
    try:
        return results.strict_json(data, rel)
    except ResultsError as exc:
        raise DeriveError(f"{rel} cannot be read: {exc}") from exc


def _object(value: Any, rel: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeriveError(f"{rel}: expected a JSON object, found {type(value).__name__}")
    return value


def not_run_target() -> TargetOnlyResult:
    return {"verdict": NOT_RUN, "reasons": [], "deterministic": False, "prompts": [], "server_log": None}


def _text_or_none(value: Any) -> str | None:
    return value[:4096] if isinstance(value, str) else None


def _server_info(root: Path) -> dict[str, str | None]:
    """The target-only server's own name and version, from its ``GET /props`` answer (none if it never answered)."""
    props = sealed_json(root, f"{judge.SERVERS}/{judge.TARGET_KEY}/props.json", required=False)
    info = props.get("server") if isinstance(props, dict) else None
    info = info if isinstance(info, dict) else {}
    return {"name": _text_or_none(info.get("name")), "version": _text_or_none(info.get("version"))}


def _steps(root: Path) -> tuple[list[CheckResult], BuildRecord | None]:
    records = sealed_json(root, CHECKS, required=False)
    if records is not None and not isinstance(records, list):
        raise DeriveError(f"{CHECKS}: expected a list of run records, found {type(records).__name__}")
    build_record = sealed_json(root, BUILD, required=False)
    try:
        checks = [steps.check_result(r, root / "checks", f"{CHECKS}[{i}]") for i, r in enumerate(records or [])]
        build = None if build_record is None else steps.build_result(build_record, root / "build", BUILD)
    except steps.StepRecordError as exc:
        raise DeriveError(str(exc)) from exc
    return checks, build


def _head(root: Path) -> Results:
    """Everything but the verdicts, read from the sealed files and validated against the schema."""
    attempt = _object(sealed_json(root, ATTEMPT), ATTEMPT)
    run = _object(sealed_json(root, RUN), RUN)
    manifest = root / MANIFEST
    doc: dict[str, Any] = {
        "schema": results.SCHEMA_ID, "schema_version": results.SCHEMA_VERSION,
        "ds4ci_version": attempt.get("ds4ci_version"),
        "runner": attempt.get("runner"),
        "started_at": attempt.get("started_at"),
        "settings": attempt.get("settings"),
        "reproduce": attempt.get("reproduce"),
        "warnings": attempt.get("notes"),
        "finished_at": run.get("finished_at"),
        "timings": run.get("timings"),
        "containment": run.get("containment"),
        "errors": run.get("errors"),
        "identities": sealed_json(root, IDENTITIES),
        "revisions": sealed_json(root, REVISIONS, required=False),
        "fingerprint": sealed_json(root, PREFLIGHT, required=False),
        "policy": sealed_json(root, POLICY),
        "provenance": sealed_json(root, PROVENANCE),
        "server": _server_info(root),
        "verdict": NOT_RUN, "reasons": [], "exit_code": EXIT_ERROR,
        "target_only": not_run_target(), "widths": [], "checks": [], "build": None,
        "evidence": {
            "dir": "", "diagnostics": None,
            "manifest_sha256": confined.digest(root, MANIFEST)[1] if manifest.is_file() else None,
        },
    }
    if "signing" in run:  # recorded since ds4ci records it; older evidence has no such key
        doc["signing"] = run["signing"]
    for key in ("evidence_dir", "attempt_id"):
        if not isinstance(run.get(key), str) or not run[key]:
            raise DeriveError(f"{RUN}: {key} must be a non-empty string")
    return _validated(doc)


def _validated(doc: Any) -> Results:
    try:
        return results.validate(doc, "the derived results")
    except ResultsError as exc:
        raise DeriveError(f"the sealed files do not make a valid results document: {exc}") from exc


def _judge_servers(root: Path, doc: Results, errors: list[str]) -> tuple[TargetOnlyResult, list[WidthResult], list[str]]:
    """The target-only result and every width, judged from the servers' raw evidence."""
    sealed = doc["settings"]
    target_identity = doc["identities"]["target"]
    settings = judge.Settings(
        widths=tuple(sealed["widths"]), repeats=sealed["repeats"], seed=sealed["seed"],
        max_tokens=sealed["max_tokens"], prompt_sha256s=tuple(p["sha256"] for p in doc["identities"]["prompts"]),
        target_sha256=target_identity["sha256"] if target_identity is not None else None,
        require_coverage=sealed.get("require_coverage") is True,
        text_parity=sealed.get("text_parity") is True,
    )
    if not (root / judge.SERVERS / judge.TARGET_KEY).is_dir():
        return not_run_target(), [], []
    keys = [judge.TARGET_KEY, *(judge.server_key(q) for q in settings.widths)]
    oracle = judge.choose_oracle(root, keys, settings)
    target = judge.judge_target(root, settings, oracle)
    warnings = list(target.warnings)
    widths: list[WidthResult] = []
    if target.errors:  # without a target-only reference no width is judged
        errors += target.errors
        for q in settings.widths:  # arms that ran side by side: each failure is named, none hidden by target-only's
            if (root / judge.SERVERS / judge.server_key(q)).is_dir():
                failed, found = judge.lifecycle_issues(judge.server_key(q), judge.load_lifecycle(root, judge.server_key(q)))
                errors += failed
                warnings += found
        return target.doc, widths, warnings
    for q in settings.widths:
        if (root / judge.SERVERS / judge.server_key(q)).is_dir():
            width, found = judge.judge_width(root, q, settings, target.reference, oracle)
            widths.append(width)
            warnings += found
        elif not errors:
            errors.append(f"q={q}: no server evidence in the bundle")
    return target.doc, widths, warnings


def _cite(root: Path, doc: Results, errors: list[str]) -> None:
    """``calibration`` from the sealed citation (when the gate sealed one); a refused record is a run error."""
    sealed = sealed_json(root, citation.CITATION, required=False)
    if sealed is None:
        return
    try:
        doc["calibration"], refused = citation.derive_calibration(sealed, doc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DeriveError(f"{citation.CITATION} is malformed ({type(exc).__name__}: {str(exc)[:200]})") from exc
    errors += refused


def derive(root: Path) -> Results:
    """The whole ``results.json`` of the sealed attempt at ``root``; raises DeriveError when none can be derived."""
    doc = _head(root)
    run = sealed_json(root, RUN)
    errors = list(doc.get("errors", []))
    checks, build = _steps(root)
    _cite(root, doc, errors)
    built = build is None or build["status"] == PASS
    target: TargetOnlyResult | None = None
    warnings = list(doc.get("warnings", []))
    try:
        if doc["runner"]["role"] == "gate":
            target, doc["widths"], found = _judge_servers(root, doc, errors)
            keys = [(judge.TARGET_KEY, None), *((judge.server_key(q), q) for q in doc["settings"]["widths"])]
            placed = arm_placements(root, keys)
            if placed is not None:  # evidence of an earlier ds4ci records none: its results have no arms
                doc["arms"] = placed
            doc["target_only"] = target
            warnings += found
            if target["verdict"] == NOT_RUN and not errors and built:
                errors.append("no target-only server evidence in the bundle")
    except judge.EvidenceError as exc:
        raise DeriveError(str(exc)) from exc
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:  # a sealed value of the wrong type
        raise DeriveError(f"the servers' sealed records are malformed ({type(exc).__name__}: {str(exc)[:200]})") from exc
    errors = list(dict.fromkeys(errors))  # one reason once (an interrupt is both the run's and its server's)
    verdict, reasons = judge.overall(errors, target, doc["widths"], checks, build, attempt=root)
    verdict, reasons = judge_tree(doc["revisions"], doc["settings"].get("allow_dirty_tree") is True, verdict, reasons)
    final = Path(run["evidence_dir"]) / (RUNS if verdict == PASS else FAILED) / run["attempt_id"]
    doc.update({
        "checks": checks, "build": build, "warnings": warnings, "errors": errors[:MAX_REASONS],
        "verdict": verdict, "reasons": reasons[:MAX_REASONS], "exit_code": EXIT_FOR_VERDICT[verdict],
    })
    doc["evidence"].update({"dir": str(final), "diagnostics": str(final / judge.SERVERS) if verdict != PASS else None})
    return _validated(cast(Any, doc))
