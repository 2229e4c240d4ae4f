"""What ``ds4ci publish`` may rest a status on: results re-derived from their evidence bundles.

Every input is a bundle (a promoted attempt directory or a ``.tar.gz`` of one) or a results.json
whose bundle is found at the evidence location recorded in it (the file must then be identical to
the bundle's own). Each bundle is verified by ``ds4ci verify``'s code, then every check in
:data:`BUNDLE_CHECKS` runs on the opened, verified bundle (the one place per-bundle trust checks
are added): the sealed head, and the trusted config's settings. A bundle that fails any of them
is published as ``error`` and shows no pass.

With ``--unverified`` every input is a results.json read as data: no path inside it is opened
(its ``evidence.dir`` is never followed), its section is labelled unverified, shows no pass mark,
never sets a status and never replaces a verified section.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ds4ci.errors import EXIT_ERROR, UsageError
from ds4ci.evidence import attestation, bundle, results
from ds4ci.evidence.store import RESULTS
from ds4ci.evidence.verify import Verification, expectation_mismatches, verify_dir
from ds4ci.judging import confined, strictjson
from ds4ci.judging.verdict import ERROR, PASS
from ds4ci.records import Results
from ds4ci.report.sections import UNVERIFIED as UNVERIFIED_STATE

UNVERIFIED = (
    "unverified: no evidence bundle backs this result (for a fork's run: produced by a workflow the pull request "
    "controls), so nothing was re-derived; it sets no status and never replaces a verified section"
)


REVISIONS = "revisions.json"
MAX_REVISIONS_BYTES = 1 << 20
NO_SEALED_HEAD = (
    "the bundle has no sealed revisions.json, so it names no commit: it cannot set a status on any commit "
    "(run the gate with --source-dir on a git checkout)"
)


NO_KEY = "not checked: the trusted config names no key for this runner"


@dataclass(frozen=True)
class Published:
    """One runner's document as it may be published, and whether it may set a status."""

    doc: Results
    may_set_status: bool
    signature: str = NO_KEY


@dataclass(frozen=True)
class Trust:
    """What the trusted side demands of every bundle: the settings of its own config (``--expect-config``) and,
    where that config names runner keys, a signature by the runner's key (``attestation.trusted_keys``)."""

    expected: Mapping[str, Any] | None = None
    unverified: bool = False
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Opened:
    """A verified bundle while it is open: its files, what it recorded, and what the checks found."""

    root: Path
    recorded: Results
    problems: list[str] = field(default_factory=list)
    may_set_status: bool = True
    signature: str | None = None  # what the signature check found, when it ran


BundleCheck = Callable[[Opened, Trust], None]


def sealed_head(root: Path) -> str | None:
    """``head.sha`` of the bundle's sealed revisions.json, read through ``confined`` like every bundle file (a
    regular file inside the bundle, size-limited); None when the bundle has none."""
    path = root / REVISIONS
    if not path.exists() and not path.is_symlink():
        return None
    try:
        doc = strictjson.loads(confined.read_bytes(root, REVISIONS, MAX_REVISIONS_BYTES), REVISIONS)
    except confined.ConfinedError as exc:
        raise UsageError(f"{REVISIONS} in the bundle cannot be read: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"{REVISIONS} in the bundle is not JSON: {exc}") from None
    head = doc.get("head") if isinstance(doc, dict) else None
    sha = head.get("sha") if isinstance(head, dict) else None
    return sha if isinstance(sha, str) else None


def check_sealed_head(found: Opened, trust: Trust) -> None:
    """The commit a status goes to is the sealed head, never one results.json names by itself."""
    sealed = sealed_head(found.root)
    recorded = found.recorded["revisions"]
    claimed = recorded["head"]["sha"] if recorded is not None else None
    if sealed is None:
        found.problems.append(NO_SEALED_HEAD)
        found.may_set_status = False
    elif claimed != sealed:
        found.problems.append(f"results.json names the head {claimed} but the sealed {REVISIONS} says {sealed}")


def check_trusted_settings(found: Opened, trust: Trust) -> None:
    """Widths, repeats, prompts, pins and checks equal the trusted config's (``--expect-config``)."""
    if trust.expected is None:
        return
    verification = Verification(str(found.root), recorded=found.recorded)
    mismatches = expectation_mismatches(verification, trust.expected, focused=True)
    if mismatches:
        found.problems.append("made with settings the trusted config does not allow: " + "; ".join(
            f"{key} {have!r} != {want!r}" for key, have, want in mismatches))


def check_signature(found: Opened, trust: Trust) -> None:
    """With runner keys in the trusted config: attestation.json signed by that runner's key, agreeing with the bundle."""
    runner = found.recorded["runner"]["name"]
    problems = attestation.bundle_problems(found.root, runner, dict(trust.keys))
    found.problems += problems
    if runner in trust.keys:
        found.signature = ("does not verify: " + "; ".join(problems)) if problems else (
            f"verified: attestation.json is signed by the key the trusted config names for {runner}")


# Every check run on each bundle that verified, in order; each may add problems (the bundle is then
# published as error) or forbid any status.
BUNDLE_CHECKS: tuple[BundleCheck, ...] = (check_sealed_head, check_signature, check_trusted_settings)


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


def not_verified(doc: Results, problems: Sequence[str], why: str = "evidence does not verify: ") -> Results:
    """The document as published when its evidence does not verify (or is refused): an error that shows no pass."""
    out = without_pass(doc, ERROR)
    reason = why + "; ".join(problems[:5])
    out["verdict"], out["exit_code"], out["reasons"] = ERROR, EXIT_ERROR, [reason[:4000]]
    return out


def _opened(path: Path, trust: Trust) -> Opened:
    """Verify the bundle and run every check of :data:`BUNDLE_CHECKS` on it while it is open."""
    try:
        with bundle.opened(path) as root:
            found = verify_dir(root, label=str(path))
            if found.recorded is None:
                why = found.problems[:3] or ([found.unreadable] if found.unreadable else [])
                raise UsageError(f"{path}: not a readable evidence bundle ({'; '.join(why)})")
            # sealed with an older schema: what is published is today's derivation (the verdicts may differ)
            older = found.notes and found.derived is not None
            opened = Opened(root, found.derived if older and found.derived is not None else found.recorded)
            if older:
                opened.recorded["warnings"] = [*found.notes, *opened.recorded["warnings"]]
            if found.problems:
                opened.problems.append("evidence does not verify: " + "; ".join(found.problems))
            else:
                for check in BUNDLE_CHECKS:
                    check(opened, trust)
            return opened
    except bundle.BundleError as exc:
        raise UsageError(f"{path}: not a readable evidence bundle ({exc})") from None


def from_bundle(path: Path, trust: Trust) -> Published:
    if trust.unverified:
        raise UsageError(
            f"{path}: --unverified takes results.json files only (read as data, never followed); "
            "publish bundles without --unverified"
        )
    found = _opened(path, trust)
    signature = found.signature or NO_KEY
    if found.problems:
        return Published(not_verified(found.recorded, found.problems, why=""), may_set_status=found.may_set_status,
                         signature=signature)
    return Published(found.recorded, may_set_status=True, signature=signature)


def labelled_unverified(doc: Results) -> Published:
    """A document read as data only: labelled unverified, no pass anywhere, no status."""
    out = without_pass(doc, UNVERIFIED_STATE)
    cast(dict[str, Any], out)["verdict"] = UNVERIFIED_STATE  # the section is labelled unverified whatever it claims
    out["warnings"] = [UNVERIFIED, *out.get("warnings", [])]
    return Published(out, may_set_status=False)


def from_results(path: Path, trust: Trust) -> Published:
    doc = results.load(path)
    if trust.unverified:  # read as data: nothing it names is opened
        return labelled_unverified(doc)
    evidence = Path(doc["evidence"]["dir"]) if doc["evidence"]["dir"] else None
    if evidence is not None and (evidence / RESULTS).is_file():
        if (evidence / RESULTS).read_bytes() != path.read_bytes():
            raise UsageError(f"{path} differs from its evidence bundle's own {evidence / RESULTS}; refusing it")
        return from_bundle(evidence, trust)
    raise UsageError(
        f"{path}: its evidence bundle ({evidence or 'none recorded'}) is not here; publish the bundle itself "
        "(the attempt directory or the gate's --bundle-out .tar.gz), or pass --unverified for a comment "
        "labelled unverified that sets no status"
    )


def load(paths: Sequence[Path], trust: Trust) -> list[Published]:
    return [from_bundle(p, trust) if is_bundle(p) else from_results(p, trust) for p in paths]
