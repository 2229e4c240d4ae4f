"""``ds4ci verify``: bundles in, one line (or JSON) per bundle, the worst exit code out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci import bundle, verify
from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, UsageError


def expectations(config_file: Path) -> dict[str, Any]:
    """What a trusted config demands of a bundle (only keys it sets; nothing is checked for files)."""
    from ds4ci.config import parse_sha256, parse_widths, read_toml

    gate = read_toml(config_file).get("gate", {})
    if not isinstance(gate, dict):
        raise UsageError(f"{config_file}: [gate] must be a table")
    out: dict[str, Any] = {k: gate[k] for k in ("max_tokens", "seed", "repeats") if k in gate}
    out["widths"] = list(parse_widths(gate.get("widths", [2, 3, 4])))
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


def verify_one(path: Path, expected: dict[str, Any] | None) -> verify.Verification:
    try:
        with bundle.opened(path) as root:
            found = verify.verify_dir(root, label=str(path))
    except bundle.BundleError as exc:
        return verify.Verification(str(path), problems=[str(exc)])
    if expected is not None:
        found.problems += verify.expectation_problems(found, expected)
    return found


def run_verify(bundles: Sequence[Path], *, as_json: bool, expect_config: Path | None) -> int:
    if not bundles:
        raise UsageError("give at least one evidence bundle (a promoted attempt directory or a .tar.gz)")
    expected = expectations(expect_config) if expect_config is not None else None
    found = [verify_one(path, expected) for path in bundles]
    if as_json:
        print(verify.dumps(found))
    else:
        for item in found:
            print(item.summary())
        if expected is None:
            print("note: no --expect-config: settings and pins were checked for consistency, not against a trusted config")
    codes = {item.exit_code for item in found}
    if EXIT_ERROR in codes:
        return EXIT_ERROR
    return EXIT_FAIL if EXIT_FAIL in codes else EXIT_PASS
