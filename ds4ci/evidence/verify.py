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
from typing import Any, Final, TypedDict

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, ResultsError, UsageError
from ds4ci.evidence import bundle, results
from ds4ci.evidence.store import MANIFEST, RESULTS, regular_files
from ds4ci.judging import confined, judge
from ds4ci.judging.verdict import ERROR, FAIL, PASS
from ds4ci.options.config import DEFAULT_WIDTHS, parse_sha256, parse_widths, read_toml
from ds4ci.records import Results, TargetOnlyResult, Verdict, WidthResult

_SEALED = (MANIFEST, RESULTS)
EXIT_FOR = {PASS: EXIT_PASS, FAIL: EXIT_FAIL}
# verify's own code for an intact, consistent bundle whose verdict is error: distinct from
# EXIT_ERROR (3), which verify keeps for evidence that does not verify.
EXIT_VERDICT_ERROR: Final = 4
# Most severe first: the code verify returns for several bundles.
EXIT_SEVERITY = (EXIT_ERROR, EXIT_VERDICT_ERROR, EXIT_FAIL, EXIT_PASS)
# Shapes of malformed sealed JSON that judging did not anticipate: still "does not verify", never a traceback.
_MALFORMED = (TypeError, KeyError, AttributeError, IndexError, ValueError, ArithmeticError, RecursionError)


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
    def intact(self) -> bool:
        """The bundle verifies: files as sealed, results.json equal to its recomputation."""
        return not self.problems and self.recomputed is not None

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 3 does not verify, 4 intact but the verdict is error (no verdict was reached)."""
        if not self.intact:
            return EXIT_ERROR
        return EXIT_FOR.get(self.verdict, EXIT_VERDICT_ERROR)

    def summary(self) -> str:
        if not self.intact:
            return f"{self.bundle}: evidence does not verify: " + "; ".join(self.problems[:20] or ["nothing recomputed"])
        if self.exit_code == EXIT_VERDICT_ERROR:
            return (f"{self.bundle}: intact and consistent; recomputed verdict error (the gate reached no verdict; "
                    f"exit {EXIT_VERDICT_ERROR})")
        return f"{self.bundle}: intact and consistent; recomputed verdict {self.verdict}"


def _manifest(root: Path, problems: list[str]) -> tuple[dict[str, Any], bytes] | None:
    """The manifest (its shape checked) and its exact bytes, or None with the problem recorded."""
    try:
        data = confined.read_bytes(root, MANIFEST)
        doc = results.strict_json(data, MANIFEST)
    except confined.ConfinedError as exc:
        problems.append(f"{exc} (an unpromoted attempt, or not an evidence bundle)")
        return None
    except ResultsError as exc:
        problems.append(f"manifest.json cannot be read: {exc}")
        return None
    entries = doc.get("evidence") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schema") != "ds4ci/manifest/v1" or not isinstance(entries, list):
        found = f"a JSON {type(doc).__name__}" if not isinstance(doc, dict) else "an object without them"
        problems.append(f"manifest.json is not a ds4ci/manifest/v1 document with an evidence list (found {found})")
        return None
    return doc, data


def _listed(entries: list[Any], problems: list[str]) -> dict[str, Mapping[str, Any]]:
    """The manifest's entries by path; a malformed, impossible or repeated entry is a problem."""
    listed: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        try:
            path = "/".join(confined.parts_of(entry.get("path") if isinstance(entry, dict) else None))
        except confined.ConfinedError:
            problems.append(f"manifest lists an impossible entry {str(entry)[:200]}")
            continue
        if path in _SEALED or not isinstance(entry.get("size"), int) or not isinstance(entry.get("sha256"), str):
            problems.append(f"manifest entry {str(entry)[:200]} is not a sealed file with an integer size and a sha256")
            continue
        if path in listed:
            problems.append(f"manifest lists {path} twice")
        listed[path] = entry
    return listed


def _matches(root: Path, path: str, entry: Mapping[str, Any]) -> str | None:
    """Why a listed file does not match its manifest entry, or None when it does."""
    try:
        size, sha = confined.digest(root, path)
    except confined.ConfinedError as exc:
        return f"{path} cannot be checked: {exc}"
    if size != entry["size"] or sha != entry["sha256"]:
        return f"{path} does not match the manifest (size or SHA-256 differs: edited after sealing)"
    return None


def _recorded(root: Path, manifest_bytes: bytes, problems: list[str]) -> Results | None:
    """results.json, read through ``confined`` and validated, and the manifest digest it must carry."""
    try:
        recorded = results.loads(confined.read_bytes(root, RESULTS, results.MAX_RESULTS_BYTES), RESULTS)
    except (confined.ConfinedError, ResultsError) as exc:
        problems.append(f"results.json cannot be used: {exc}")
        return None
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    if recorded["evidence"]["manifest_sha256"] != digest:
        problems.append(
            f"results.json records manifest digest {recorded['evidence']['manifest_sha256']}, "
            f"but manifest.json has {digest}"
        )
    return recorded


def check_integrity(root: Path) -> tuple[list[str], Results | None]:
    """Problems with the bundle's files, and its results.json when it could be read."""
    files, problems = regular_files(root)
    found = _manifest(root, problems)
    if found is None:
        return problems, None
    listed = _listed(found[0]["evidence"], problems)
    for path, entry in sorted(listed.items()):
        if path not in files:
            problems.append(f"{path} is listed in the manifest but missing (or not a regular file)")
        elif (why := _matches(root, path, entry)) is not None:
            problems.append(why)
    for path in sorted(set(files) - set(listed) - set(_SEALED)):
        problems.append(f"{path} is not listed in the manifest (added after sealing)")
    return problems, _recorded(root, found[1], problems)


def _sealed_settings(root: Path, recorded: Results, problems: list[str]) -> judge.Settings | None:
    """The settings and prompt identities the gate sealed at the start, checked against results.json."""
    try:
        attempt = judge.read_json(root, "attempt.json")
        identities = judge.read_json(root, "identities.json")
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
    try:
        recomputed = recompute(root, recorded, found.problems)
    except _MALFORMED as exc:
        found.problems.append(f"the sealed evidence has an unexpected shape ({type(exc).__name__}: {str(exc)[:200]})")
        return found
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
        "bundle": found.bundle, "verifies": found.intact, "verdict": found.verdict, "exit_code": found.exit_code,
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


def verify_path(path: Path, expected: dict[str, Any] | None) -> Verification:
    try:
        with bundle.opened(path) as root:
            found = verify_dir(root, label=str(path))
    except bundle.BundleError as exc:
        return Verification(str(path), problems=[str(exc)])
    if expected is not None:
        found.problems += expectation_problems(found, expected)
    return found
