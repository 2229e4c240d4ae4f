"""``ds4ci verify``: bundles in, one line (or JSON) per bundle, the worst exit code out.

Exit codes: 0 every bundle intact and pass; 1 intact, a fail; 4 intact, a verdict error (the gate
reached no verdict); 3 a bundle does not verify (tampered, unreadable, not a bundle); 5 intact, but of
an evidence schema this ds4ci cannot read; 2 a path that does not exist or a bad flag. With several
bundles the most severe wins (3, 5, 4, 1, 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ds4ci.calibrate.record import is_record, verify_record
from ds4ci.errors import UsageError
from ds4ci.evidence import attestation, bundle, verify
from ds4ci.options.values import public_key_line
from ds4ci.textsafe import json_text, neutralise


def run_verify(
    bundles: Sequence[Path], *, as_json: bool, expect_config: Path | None, keys: Sequence[str] = (),
    max_extract_mib: int = bundle.EXTRACT_BUDGET_BYTES >> 20,
) -> int:
    if not bundles:
        raise UsageError("give at least one evidence bundle (a promoted attempt directory or a .tar.gz)")
    if max_extract_mib < 1:
        raise UsageError(f"--max-extract-mib must be at least 1; got {max_extract_mib}")
    expected = verify.expectations(expect_config) if expect_config is not None else None
    trusted = attestation.trusted_keys(expect_config) if expect_config is not None else {}
    if keys:
        trusted[attestation.ANY_RUNNER] = tuple(public_key_line(k, "--key") for k in keys)
    records = [p for p in bundles if is_record(p)]
    if records:
        return _verify_records(records, bundles, as_json, trusted)
    found = [verify.verify_path(path, expected, trusted, max_extract_mib << 20) for path in bundles]
    if as_json:
        print(verify.dumps(found))
    else:
        for item in found:
            print(neutralise(item.summary()))  # a bundle's text is the attacker's
        if expected is None:
            print("note: no --expect-config: settings and pins were checked for consistency, not against a trusted config")
    codes = {item.exit_code for item in found}
    return next(code for code in verify.EXIT_SEVERITY if code in codes)


def _verify_records(records: Sequence[Path], given: Sequence[Path], as_json: bool,
                    trusted: dict[str, tuple[str, ...]]) -> int:
    """Calibration records (``ds4ci calibrate``'s OUT/record): derived again from every gate's own bundle."""
    if len(records) != len(given):
        raise UsageError("give calibration records or gate bundles, not both in one call")
    found = [verify_record(path, trusted) for path in records]
    if as_json:
        print(json_text(json.dumps([{"record": f.path, "verifies": f.intact, "exit_code": f.exit_code,
                                     "problems": f.problems, "recomputed": f.doc} for f in found], indent=2, sort_keys=True)))
    else:
        for item in found:
            print(neutralise(item.summary()))
    codes = {item.exit_code for item in found}
    return next(code for code in verify.EXIT_SEVERITY if code in codes)
