"""``ds4ci verify``: bundles in, one line (or JSON) per bundle, the worst exit code out."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ds4ci.errors import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, UsageError
from ds4ci.evidence import attestation, verify
from ds4ci.options.values import public_key_line


def run_verify(
    bundles: Sequence[Path], *, as_json: bool, expect_config: Path | None, keys: Sequence[str] = ()
) -> int:
    if not bundles:
        raise UsageError("give at least one evidence bundle (a promoted attempt directory or a .tar.gz)")
    expected = verify.expectations(expect_config) if expect_config is not None else None
    trusted = attestation.trusted_keys(expect_config) if expect_config is not None else {}
    if keys:
        trusted[attestation.ANY_RUNNER] = tuple(public_key_line(k, "--key") for k in keys)
    found = [verify.verify_path(path, expected, trusted) for path in bundles]
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
