"""``ds4ci verify``: re-derive a gate's verdict from its sealed evidence bundle, trusting nothing.

A bundle is a promoted attempt directory (or a ``.tar.gz`` of one, see ``bundle.py``). Steps:

1. integrity: every file listed in ``manifest.json`` is there with its size and SHA-256, nothing
   else is (no extra file, no symlink or special file, no path outside the bundle), and
   ``results.json`` carries the manifest's digest;
2. recomputation: every server log is re-parsed and every per-request, per-width and overall
   verdict recomputed by ``judge`` (the code the gate itself judged with) from the raw logs, the
   recorded requests and the sealed settings (``attempt.json``, ``identities.json``);
3. comparison with ``results.json`` field by field; any disagreement is an error.

``results.json`` is a summary, never the authority. Exit 0: intact, consistent, pass; 1: intact,
consistent, fail; 3: anything that does not verify.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, ResultsError, UsageError
from ds4ci.evidence import attestation, bundle, results
from ds4ci.evidence.store import MANIFEST, RESULTS, regular_files
from ds4ci.judging import judge
from ds4ci.judging.verdict import ERROR, FAIL, PASS
from ds4ci.options.config import DEFAULT_WIDTHS, parse_sha256, parse_widths, read_toml
from ds4ci.records import Results, TargetOnlyResult, Verdict, WidthResult
from ds4ci.runner.identity import hash_file

_SEALED = (MANIFEST, RESULTS, attestation.ATTESTATION)  # beside the manifest, not in it
EXIT_FOR = {PASS: EXIT_PASS, FAIL: EXIT_FAIL}


class Recomputed(TypedDict):
    """The verdict-bearing part of results.json, as recomputed from the raw evidence."""

    verdict: Verdict
    reasons: list[str]
    target_only: TargetOnlyResult
    widths: list[WidthResult]


@dataclass
class Verification:
    """What verify found for one bundle."""

    bundle: str
    problems: list[str] = field(default_factory=list)  # anything here means: does not verify
    recomputed: Recomputed | None = None
    recorded: Results | None = None

    @property
    def verdict(self) -> Verdict:
        if self.problems or self.recomputed is None:
            return ERROR
        return self.recomputed["verdict"]

    @property
    def exit_code(self) -> int:
        return EXIT_FOR.get(self.verdict, EXIT_ERROR) if not self.problems else EXIT_ERROR

    def summary(self) -> str:
        if self.problems:
            return f"{self.bundle}: evidence does not verify: " + "; ".join(self.problems[:20])
        assert self.recomputed is not None
        return f"{self.bundle}: intact and consistent; recomputed verdict {self.recomputed['verdict']}"


def _manifest(root: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        doc = results.strict_json((root / MANIFEST).read_bytes(), MANIFEST)
    except FileNotFoundError:
        problems.append("manifest.json is missing (an unpromoted attempt, or not an evidence bundle)")
        return None
    except (OSError, ResultsError) as exc:
        problems.append(f"manifest.json cannot be read: {exc}")
        return None
    entries = doc.get("evidence") if isinstance(doc, dict) else None
    if doc.get("schema") != "ds4ci/manifest/v1" or not isinstance(entries, list):
        problems.append("manifest.json is not a ds4ci/manifest/v1 document with an evidence list")
        return None
    manifest: dict[str, Any] = doc
    return manifest


def check_integrity(root: Path) -> tuple[list[str], Results | None]:
    """Problems with the bundle's files, and its results.json when it could be read."""
    files, problems = regular_files(root)
    manifest = _manifest(root, problems)
    if manifest is None:
        return problems, None
    listed: dict[str, Mapping[str, Any]] = {}
    for entry in manifest["evidence"]:
        path = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(path, str) or path.startswith("/") or ".." in Path(path).parts or path in _SEALED:
            problems.append(f"manifest lists an impossible path {path!r}")
            continue
        if path in listed:
            problems.append(f"manifest lists {path} twice")
        listed[path] = entry
    for path, entry in sorted(listed.items()):
        found = files.get(path)
        if found is None:
            problems.append(f"{path} is listed in the manifest but missing")
        elif found.stat().st_size != entry.get("size") or hash_file(found) != entry.get("sha256"):
            problems.append(f"{path} does not match the manifest (size or SHA-256 differs: edited after sealing)")
    for path in sorted(set(files) - set(listed) - set(_SEALED)):
        problems.append(f"{path} is not listed in the manifest (added after sealing)")
    try:
        recorded = results.load(root / RESULTS)
    except ResultsError as exc:
        problems.append(str(exc))
        return problems, None
    digest = hashlib.sha256((root / MANIFEST).read_bytes()).hexdigest()
    if recorded["evidence"]["manifest_sha256"] != digest:
        problems.append(
            f"results.json records manifest digest {recorded['evidence']['manifest_sha256']}, "
            f"but manifest.json has {digest}"
        )
    return problems, recorded


def _sealed_settings(root: Path, recorded: Results, problems: list[str]) -> judge.Settings | None:
    """The settings and prompt identities the gate sealed at the start, checked against results.json."""
    try:
        attempt = judge.read_json(root / "attempt.json")
        identities = judge.read_json(root / "identities.json")
    except judge.EvidenceError as exc:
        problems.append(str(exc))
        return None
    settings = attempt.get("settings") if isinstance(attempt, dict) else None
    if settings != recorded["settings"]:
        problems.append("results.json settings differ from the settings sealed in attempt.json")
        return None
    if identities != recorded["identities"]:
        problems.append("results.json identities differ from identities.json")
        return None
    # Equal to the validated records above, so the typed copies are read from here on.
    sealed, prompts = recorded["settings"], recorded["identities"]["prompts"]
    return judge.Settings(
        widths=tuple(sealed["widths"]), repeats=sealed["repeats"], seed=sealed["seed"],
        max_tokens=sealed["max_tokens"], prompt_sha256s=tuple(p["sha256"] for p in prompts),
    )


def recompute(root: Path, recorded: Results, problems: list[str]) -> Recomputed | None:
    """The verdict-bearing part of results.json, recomputed from the raw evidence."""
    if recorded["runner"]["role"] != "gate":  # a negative control ran checks only: no server evidence
        verdict, reasons = judge.overall(list(recorded.get("errors", [])), None, [], recorded["checks"], recorded.get("build"))
        return {"verdict": verdict, "reasons": reasons[:200], "target_only": recorded["target_only"], "widths": []}
    settings = _sealed_settings(root, recorded, problems)
    if settings is None:
        return None
    errors = list(recorded.get("errors", []))
    build = recorded.get("build")
    built = build is None or build["status"] == "pass"
    target_doc: TargetOnlyResult | None = None
    widths: list[WidthResult] = []
    try:
        if (root / judge.SERVERS / judge.TARGET_KEY).is_dir():
            target = judge.judge_target(root, settings)
            target_doc = target.doc
            for q in settings.widths:
                if (root / judge.SERVERS / judge.server_key(q)).is_dir():
                    widths.append(judge.judge_width(root, q, settings, target.reference)[0])
                elif not target.errors:
                    errors.append(f"q={q}: no server evidence in the bundle")
        elif not errors and built:
            errors.append("no target-only server evidence in the bundle")
    except judge.EvidenceError as exc:
        problems.append(str(exc))
        return None
    checks = recorded["checks"]
    target_for_overall = target_doc if target_doc is not None else recorded["target_only"]
    verdict, reasons = judge.overall(errors, target_for_overall, widths, checks, build)
    return {
        "verdict": verdict,
        "reasons": reasons[:200],
        "target_only": target_doc if target_doc is not None else recorded["target_only"],
        "widths": widths,
    }


def compare(recorded: Results, recomputed: Recomputed) -> list[str]:
    """Every verdict-bearing field where results.json and the recomputation disagree."""
    problems: list[str] = []
    if recorded["verdict"] != recomputed["verdict"]:
        problems.append(f"overall verdict recorded {recorded['verdict']}, recomputed {recomputed['verdict']}")
    if recorded["reasons"] != recomputed["reasons"]:
        problems.append("the recorded reasons differ from the recomputed ones")
    if recorded["target_only"] != recomputed["target_only"]:
        problems.append("the target-only result differs from its recomputation")
    got = {w["q"]: w for w in recorded["widths"]}
    want = {w["q"]: w for w in recomputed["widths"]}
    for q in sorted(set(got) | set(want)):
        if q not in got:
            problems.append(f"q={q}: in the evidence but missing from results.json")
        elif q not in want:
            problems.append(f"q={q}: in results.json but without server evidence")
        elif got[q] != want[q]:
            problems.append(_width_difference(q, got[q], want[q]))
    return problems


def _differing_keys(got: Mapping[str, object], want: Mapping[str, object]) -> list[str]:
    """The keys of two records whose values differ (a record's key set is fixed, so ``get`` only pairs them)."""
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


def _width_difference(q: int, got: WidthResult, want: WidthResult) -> str:
    if got["verdict"] != want["verdict"]:
        detail = next((r for r in want["reasons"] if "token IDs differ" in r), want["reasons"][0] if want["reasons"] else "")
        return f"q={q} verdict recorded {got['verdict']}, recomputed {want['verdict']}" + (f": {detail}" if detail else "")
    fields = _differing_keys(got, want)
    cells = sorted(
        f"prompt {a['prompt_index']} {k}"
        for a, b in zip(got["prompts"], want["prompts"], strict=False)
        for k in _differing_keys(a, b)
    )
    return f"q={q}: recorded {', '.join(cells or fields)} differ from the recomputation"


def verify_dir(root: Path, label: str | None = None) -> Verification:
    found = Verification(label or str(root))
    problems, recorded = check_integrity(root)
    found.problems += problems
    found.recorded = recorded
    if recorded is None:
        return found
    recomputed = recompute(root, recorded, found.problems)
    found.recomputed = recomputed
    if recomputed is not None:
        found.problems += compare(recorded, recomputed)
    return found


def expectation_problems(found: Verification, expected: Mapping[str, Any]) -> list[str]:
    """Settings and pins the trusted side demands (from its own config) that the bundle must show."""
    recorded = found.recorded
    if recorded is None:
        return []
    problems = []
    settings = recorded["settings"]
    ran: dict[str, object] = {
        "widths": settings["widths"], "max_tokens": settings["max_tokens"], "seed": settings["seed"],
        "repeats": settings["repeats"],
    }
    for key, value in ran.items():
        if key in expected and value != expected[key]:
            problems.append(f"{key}: the trusted config expects {expected[key]!r}, the bundle ran {value!r}")
    ids = recorded["identities"]
    for role, identity in (("target", ids["target"]), ("draft", ids["draft"]), ("server_bin", ids["server_bin"])):
        want = expected.get(f"{role}_sha256")
        have = identity["sha256"] if identity is not None else None
        if want is not None and want != have:
            problems.append(f"{role}: the trusted config pins {want}, the bundle ran {have}")
    want_prompts: Sequence[str] | None = expected.get("prompt_sha256s")
    if want_prompts is not None and [p["sha256"] for p in ids["prompts"]] != list(want_prompts):
        problems.append("prompts: the bundle's prompt SHA-256s differ from the trusted config's")
    return problems


def as_json(found: Verification) -> dict[str, Any]:
    return {
        "bundle": found.bundle, "verifies": not found.problems, "verdict": found.verdict, "exit_code": found.exit_code,
        "problems": found.problems, "recomputed": found.recomputed,
    }


def dumps(items: Sequence[Verification]) -> str:
    return json.dumps([as_json(v) for v in items], indent=2, sort_keys=True)


def expectations(config_file: Path) -> dict[str, Any]:
    """What a trusted config demands of a bundle (only keys it sets; nothing is checked for files)."""
    gate = read_toml(config_file).get("gate", {})
    if not isinstance(gate, dict):
        raise UsageError(f"{config_file}: [gate] must be a table")
    out: dict[str, Any] = {k: gate[k] for k in ("max_tokens", "seed", "repeats") if k in gate}
    out["widths"] = list(parse_widths(gate.get("widths", DEFAULT_WIDTHS)))
    for role, key in (("target", "target_sha256"), ("draft", "draft_sha256"), ("server_bin", "server_sha256")):
        if key in gate:
            out[f"{role}_sha256"] = parse_sha256(gate[key], f"{config_file}: gate.{key}")
    prompts = gate.get("prompts")
    if prompts is not None:
        if not isinstance(prompts, list) or not all(isinstance(p, dict) for p in prompts):
            raise UsageError(f"{config_file}: gate.prompts must be an array of tables with a sha256 each")
        out["prompt_sha256s"] = [parse_sha256(p.get("sha256"), f"{config_file}: gate.prompts[{i}].sha256")
                                 for i, p in enumerate(prompts)]
    return out


def verify_path(
    path: Path, expected: dict[str, Any] | None, trusted: dict[str, tuple[str, ...]] | None = None
) -> Verification:
    """Verify one bundle; with ``trusted`` runner keys (``attestation.trusted_keys``) its signature too."""
    try:
        with bundle.opened(path) as root:
            found = verify_dir(root, label=str(path))
            runner = found.recorded["runner"]["name"] if found.recorded is not None else None
            found.problems += attestation.bundle_problems(root, runner, trusted or {})
    except bundle.BundleError as exc:
        return Verification(str(path), problems=[str(exc)])
    if expected is not None:
        found.problems += expectation_problems(found, expected)
    return found
