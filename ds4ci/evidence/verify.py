"""``ds4ci verify``: re-derive a gate's verdict from its sealed evidence bundle, trusting nothing.

A bundle is a promoted attempt directory (or a ``.tar.gz`` of one, see ``bundle.py``). Steps:

1. integrity: every file listed in ``manifest.json`` is there with its size and SHA-256, nothing
   else is (no extra file, no symlink or special file, no path outside the bundle), and
   ``results.json`` carries the manifest's digest;
2. derivation: the whole ``results.json`` is derived again from the sealed files by ``derive``
   (the function the gate wrote it with): every server log re-parsed, every answer read, every
   per-request, per-width and overall verdict, every check and the build re-judged, every other
   field read from the sealed file it comes from (``docs/results.md``);
3. comparison with ``results.json`` as canonical JSON; the first key path that differs is named.
   A bundle sealed with an older schema (``convert``) is compared in its copied fields only; its
   verdicts, re-derived with today's rules, are compared as a finding (``differ.across_versions``).

``results.json`` is a summary, never the authority. Exit 0: intact, consistent, pass; 1: intact,
consistent, fail; 4: intact, the verdict is error; 3: anything that does not verify; 5: intact, but
of a schema version this ds4ci cannot read (the message names the ds4ci to install).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypedDict

from ds4ci import __version__
from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, ResultsError, UsageError
from ds4ci.evidence import attestation, bundle, convert, results
from ds4ci.evidence.buildexpect import build_mismatches
from ds4ci.evidence.derive import DeriveError, derive
from ds4ci.evidence.differ import across_versions, compare
from ds4ci.evidence.store import MANIFEST, MANIFEST_SCHEMA, RESULTS, regular_files
from ds4ci.judging import confined
from ds4ci.judging.tree import tree_note
from ds4ci.judging.verdict import ERROR, FAIL, PASS
from ds4ci.options.config import DEFAULT_WIDTHS, parse_sha256, parse_widths, read_toml
from ds4ci.records import Results, TargetOnlyResult, Verdict, WidthResult

_SEALED = (MANIFEST, RESULTS, attestation.ATTESTATION)  # beside the manifest, not in it
EXIT_FOR = {PASS: EXIT_PASS, FAIL: EXIT_FAIL}
# verify's own code for an intact, consistent bundle whose verdict is error: distinct from
# EXIT_ERROR (3), which verify keeps for evidence that does not verify.
EXIT_VERDICT_ERROR: Final = 4
# verify's code for an intact bundle of a schema version this ds4ci cannot read (convert.UnreadableSchema).
EXIT_UNREADABLE_SCHEMA: Final = 5
# Most severe first: the code verify returns for several bundles.
EXIT_SEVERITY = (EXIT_ERROR, EXIT_UNREADABLE_SCHEMA, EXIT_VERDICT_ERROR, EXIT_FAIL, EXIT_PASS)
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
    recorded: Results | None = None  # in today's shape (convert), whatever schema it was sealed with
    derived: Results | None = None  # what today's rules derive from the sealed files
    sealed_schema: int | None = None  # the schema version results.json was sealed with
    unreadable: str | None = None  # why this ds4ci cannot read the bundle's schema, and what to install
    notes: list[str] = field(default_factory=list)  # across schema versions: sealed by whom, do the verdicts agree

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
        """0 pass, 1 fail, 3 does not verify, 4 intact but the verdict is error (no verdict was reached),
        5 intact but of a schema this ds4ci cannot read."""
        if not self.problems and self.unreadable is not None:
            return EXIT_UNREADABLE_SCHEMA
        if not self.intact:
            return EXIT_ERROR
        return EXIT_FOR.get(self.verdict, EXIT_VERDICT_ERROR)

    def summary(self) -> str:
        if not self.problems and self.unreadable is not None:
            return (f"{self.bundle}: its files match the manifest, but this ds4ci cannot re-derive it: {self.unreadable} "
                    f"(exit {EXIT_UNREADABLE_SCHEMA})")
        if not self.intact:
            return f"{self.bundle}: evidence does not verify: " + "; ".join(self.problems[:20] or ["nothing recomputed"])
        notes = "".join(f"; {n}" for n in self.notes)
        if self.exit_code == EXIT_VERDICT_ERROR:
            return (f"{self.bundle}: intact and consistent; recomputed verdict error (the gate reached no verdict; "
                    f"exit {EXIT_VERDICT_ERROR}){notes}")
        return f"{self.bundle}: intact and consistent; recomputed verdict {self.verdict}{notes}"


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
    if not isinstance(doc, dict) or doc.get("schema") != MANIFEST_SCHEMA or not isinstance(entries, list):
        found = f"a JSON {type(doc).__name__}" if not isinstance(doc, dict) else "an object without them"
        problems.append(f"manifest.json is not a {MANIFEST_SCHEMA} document with an evidence list (found {found})")
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


def _versions_agree(manifest: Mapping[str, Any], sealed_schema: int) -> str | None:
    """Why the manifest's schema_version (absent before schema 3) contradicts results.json's, or None."""
    have = manifest.get("schema_version")
    if have == sealed_schema or (have is None and sealed_schema < results.SCHEMA_VERSION):
        return None
    return (f"manifest.json records schema_version {have!r} but results.json has schema {sealed_schema} "
            "(one bundle is sealed with one schema)")


def _recorded(root: Path, manifest: tuple[dict[str, Any], bytes], found: Verification) -> Results | None:
    """results.json, read through ``confined``, converted to today's shape and validated; the schema version it
    was sealed with, which the manifest must agree with, and the manifest digest it must carry."""
    try:
        recorded, found.sealed_schema = results.sealed(
            confined.read_bytes(root, RESULTS, results.MAX_RESULTS_BYTES), RESULTS)
    except convert.UnreadableSchema as exc:
        why = _versions_agree(manifest[0], exc.version)
        found.problems += [why] if why is not None else []
        found.unreadable = str(exc) if why is None else None
        return None
    except (confined.ConfinedError, ResultsError) as exc:
        found.problems.append(f"results.json cannot be used: {exc}")
        return None
    if (why := _versions_agree(manifest[0], found.sealed_schema)) is not None:
        found.problems.append(why)
    digest = hashlib.sha256(manifest[1]).hexdigest()
    if recorded["evidence"]["manifest_sha256"] != digest:
        found.problems.append(
            f"results.json records manifest digest {recorded['evidence']['manifest_sha256']}, "
            f"but manifest.json has {digest}"
        )
    return recorded


def check_files(root: Path, beside: Sequence[str] = _SEALED) -> tuple[list[str], tuple[dict[str, Any], bytes] | None]:
    """Problems with a sealed folder's files against its manifest (``beside``: the files written after it), and the
    manifest (its document and exact bytes) when it could be read."""
    files, problems = regular_files(root)
    manifest = _manifest(root, problems)
    if manifest is None:
        return problems, None
    listed = _listed(manifest[0]["evidence"], problems)
    for path, entry in sorted(listed.items()):
        if path not in files:
            problems.append(f"{path} is listed in the manifest but missing (or not a regular file)")
        elif (why := _matches(root, path, entry)) is not None:
            problems.append(why)
    for path in sorted(set(files) - set(listed) - set(beside)):
        problems.append(f"{path} is not listed in the manifest (added after sealing)")
    return problems, manifest


def check_integrity(root: Path, found: Verification) -> None:
    """The bundle's files against its manifest (problems into ``found``), then its results.json (``found.recorded``)."""
    problems, manifest = check_files(root)
    found.problems += problems
    if manifest is not None:
        found.recorded = _recorded(root, manifest, found)


def recompute(derived: Results) -> Recomputed:
    """The verdict-bearing part of a derived document (what ``--json`` shows as recomputed)."""
    return {
        "verdict": derived["verdict"], "reasons": derived["reasons"],
        "target_only": derived["target_only"], "widths": derived["widths"],
    }


def verify_dir(root: Path, label: str | None = None) -> Verification:
    found = Verification(label or str(root))
    check_integrity(root, found)
    recorded = found.recorded
    if recorded is None or found.sealed_schema is None:
        return found
    try:
        derived = derive(root)
    except DeriveError as exc:
        found.problems.append(f"no results can be derived from the sealed files: {exc}")
        return found
    except _MALFORMED as exc:
        found.problems.append(f"the sealed evidence has an unexpected shape ({type(exc).__name__}: {str(exc)[:200]})")
        return found
    found.recomputed, found.derived = recompute(derived), derived
    if found.sealed_schema == results.SCHEMA_VERSION:
        found.problems += compare(recorded, derived)
    else:
        problems, found.notes = across_versions(recorded, derived, found.sealed_schema, recorded["ds4ci_version"],
                                                __version__)
        found.problems += problems
    return found


def _for_runner(expected: Mapping[str, Any], runner: str) -> dict[str, Any]:
    """The trusted expectations for one runner: ``[gate]``'s, with its ``[runners.<name>]`` table applied."""
    own = expected.get("runners", {}).get(runner, {})
    return {**{k: val for k, val in expected.items() if k != "runners"}, **own}


def never_hashed(recorded: Results) -> bool:
    """The run stopped before it hashed any input (its build failed, its tree was refused): its identities were
    never reached, so they are no mismatch with a trusted config. A pass always hashed them."""
    ids = recorded["identities"]
    return (recorded["verdict"] != "pass" and not ids["prompts"]
            and all(ids[role] is None for role in ("target", "draft", "server_bin")))


def expectation_mismatches(
    found: Verification, expected: Mapping[str, Any], *, focused: bool = False
) -> list[tuple[str, object, object]]:
    """(setting, what the bundle ran, what the trusted config allows) for every setting that differs.

    ``focused``: a focused rerun (fewer widths, all of them configured, and the configured widths
    equal to the trusted ones) is allowed; whether it may turn green is the publisher's policy.
    """
    recorded = found.recorded
    if recorded is None:
        return []
    want = _for_runner(expected, recorded["runner"]["name"])
    settings = recorded["settings"]
    out: list[tuple[str, object, object]] = []
    role = want.get("role", "gate")
    if recorded["runner"]["role"] != role:
        out.append(("role", recorded["runner"]["role"], role))
    checks = [[c["name"], c["command"]] for c in recorded["checks"]]
    if "checks" in want and checks != want["checks"]:
        out.append(("checks", checks, want["checks"]))
    out += build_mismatches(recorded.get("build"), want.get("build"), hashed=not never_hashed(recorded))
    server = settings.get("server", "program")  # a bundle of a ds4ci that did not record it ran a program
    if server != want.get("server", "program"):
        out.append(("server", server, want.get("server", "program")))
    if role != "gate":  # a negative control runs the checks only: no models, widths or prompts
        return out
    widths = settings["widths"]
    focused_ok = (focused and settings.get("scope") == "focused" and set(widths) < set(want.get("widths", ()))
                  and settings.get("configured_widths") == want.get("widths"))
    if "widths" in want and widths != want["widths"] and not focused_ok:
        out.append(("widths", widths, want["widths"]))
    for key in ("max_tokens", "seed", "repeats"):
        if key in want and settings[key] != want[key]:
            out.append((key, settings[key], want[key]))
    # A modified tree passed only because the bundle's own settings allowed it: the trusted config must too.
    if (tree_note(recorded["revisions"]) is not None and settings.get("allow_dirty_tree") is True
            and want.get("allow_dirty_tree") is not True):
        out.append(("allow_dirty_tree", True, False))
    ids = recorded["identities"]
    if never_hashed(recorded):  # stopped before any input was hashed (a failed build): nothing ran to compare
        return out
    for role_name, identity in (("target", ids["target"]), ("draft", ids["draft"]), ("server_bin", ids["server_bin"])):
        have = identity["sha256"] if identity is not None else None
        if want.get(f"{role_name}_sha256") not in (None, have):
            out.append((role_name, have, want[f"{role_name}_sha256"]))
    prompts = [p["sha256"] for p in ids["prompts"]]
    if want.get("prompt_sha256s") is not None and prompts != list(want["prompt_sha256s"]):
        out.append(("prompts", prompts, list(want["prompt_sha256s"])))
    return out


def expectation_problems(found: Verification, expected: Mapping[str, Any]) -> list[str]:
    """Settings and pins the trusted side demands (from its own config) that the bundle must show."""
    problems = []
    for key, have, want in expectation_mismatches(found, expected):
        if key in ("target", "draft", "server_bin"):
            problems.append(f"{key}: the trusted config pins {want}, the bundle ran {have}")
        elif key == "prompts":
            problems.append("prompts: the bundle's prompt SHA-256s differ from the trusted config's")
        else:
            problems.append(f"{key}: the trusted config expects {want!r}, the bundle ran {have!r}")
    return problems


def as_json(found: Verification) -> dict[str, Any]:
    return {
        "bundle": found.bundle, "verifies": found.intact, "verdict": found.verdict, "exit_code": found.exit_code,
        "problems": found.problems, "recomputed": found.recomputed, "sealed_schema": found.sealed_schema,
        "schema": results.SCHEMA_VERSION, "notes": found.notes, "unreadable": found.unreadable,
    }


def dumps(items: Sequence[Verification]) -> str:
    return json.dumps([as_json(v) for v in items], indent=2, sort_keys=True)


_RUNNER_EXPECTED = {"max_tokens": "max_tokens", "seed": "seed", "repeats": "repeats", "target_sha256": "target_sha256",
                    "draft_sha256": "draft_sha256", "server_sha256": "server_bin_sha256"}


def _gate_expectations(gate: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What one settings table ([gate] or a [runners.<name>] table) demands; only the keys it sets."""
    out: dict[str, Any] = {}
    for key, name in _RUNNER_EXPECTED.items():
        if key in gate:
            out[name] = parse_sha256(gate[key], f"{where}.{key}") if key.endswith("sha256") else gate[key]
    if "widths" in gate:
        out["widths"] = list(parse_widths(gate["widths"]))
    if "role" in gate:
        out["role"] = gate["role"]
    if "server" in gate:
        out["server"] = gate["server"]
    if "allow_dirty_tree" in gate:
        out["allow_dirty_tree"] = gate["allow_dirty_tree"] is True
    prompts = gate.get("prompts")
    if prompts is not None:
        if not isinstance(prompts, list) or not all(isinstance(p, dict) for p in prompts):
            raise UsageError(f"{where}.prompts must be an array of tables with a sha256 each")
        out["prompt_sha256s"] = [parse_sha256(p.get("sha256"), f"{where}.prompts[{i}].sha256")
                                 for i, p in enumerate(prompts)]
    return out


def expectations(config_file: Path) -> dict[str, Any]:
    """What a trusted config demands of a bundle: settings, pins, prompts, checks, and per-runner tables."""
    doc = read_toml(config_file)
    gate, runner, runners = doc.get("gate", {}), doc.get("runner", {}), doc.get("runners", {})
    if not all(isinstance(t, dict) for t in (gate, runner, runners)) or not all(
            isinstance(t, dict) for t in runners.values()):
        raise UsageError(f"{config_file}: [gate], [runner] and [runners.<name>] must be tables")
    out = _gate_expectations({**gate, **({"role": runner["role"]} if "role" in runner else {})},
                             f"{config_file}: gate")
    out.setdefault("widths", list(DEFAULT_WIDTHS))
    checks = doc.get("checks", [])
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        raise UsageError(f"{config_file}: checks must be [[checks]] tables")
    out["checks"] = [[c.get("name"), c.get("command")] for c in checks]
    build = doc.get("build")
    if build is not None and not isinstance(build, dict):
        raise UsageError(f"{config_file}: [build] must be a table")
    out["build"] = None if build is None else {"command": build.get("command"), "cwd": build.get("cwd"),
                                               "server_bin": build.get("server_bin")}
    out.setdefault("server", "program")
    out["runners"] = {name: _gate_expectations(t, f"{config_file}: runners.{name}") for name, t in runners.items()}
    return out


def verify_path(
    path: Path, expected: dict[str, Any] | None, trusted: dict[str, tuple[str, ...]] | None = None,
    budget: int = bundle.EXTRACT_BUDGET_BYTES,
) -> Verification:
    """Verify one bundle; with ``trusted`` runner keys (``attestation.trusted_keys``) its signature too.
    An archive is extracted within ``budget`` bytes (ds4ci's, never its manifest's)."""
    try:
        with bundle.opened(path, budget) as root:
            found = verify_dir(root, label=str(path))
            runner = found.recorded["runner"]["name"] if found.recorded is not None else None
            found.problems += attestation.bundle_problems(root, runner, trusted or {})
    except bundle.BundleError as exc:
        return Verification(str(path), problems=[str(exc)])
    if expected is not None:
        found.problems += expectation_problems(found, expected)
    return found
