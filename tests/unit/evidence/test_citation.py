"""results.json ``calibration`` from a sealed citation.json: each state, and every way it is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ds4ci.evidence.citation import derive_calibration, pins_of

RUN: dict[str, Any] = {
    "runner": {"name": "h200", "role": "gate"},
    "identities": {"target": {"sha256": "a" * 64}, "draft": {"sha256": "b" * 64}, "prompts": [{"sha256": "c" * 64}]},
    "settings": {"widths": [2, 3, 4], "max_tokens": 96, "seed": 1, "repeats": 2},
}
SEALED: dict[str, Any] = {
    "folder": "/var/lib/ds4ci/calibrations", "runner": "h200", "record": "/var/lib/ds4ci/calibrations/x/record",
    "problems": [], "others": [],
    "calibration": {"sha256": "d" * 64, "runner": "h200", "finished": "2026-12-07T10:00:00Z", "engine_commit": "e" * 40,
                    "caught": 13, "acting": 13, "summary": "planted faults caught: 13 of 13 at every width where they can act",
                    "verdict": "pass", "reasons": [], "pins": {**pins_of(RUN), "widths": [2, 3]}},
}


def sealed(**change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SEALED)
    for key, value in change.items():
        if key in SEALED["calibration"] and isinstance(doc["calibration"], dict):
            doc["calibration"][key] = value
        else:
            doc[key] = value
    return doc


def test_a_verified_passing_record_is_cited_in_the_reports_words() -> None:
    found, errors = derive_calibration(sealed(), RUN)
    assert errors == []
    assert found == {"state": "cited", "record_sha256": "d" * 64, "finished": "2026-12-07T10:00:00Z",
                     "engine_commit": "e" * 40, "caught": 13, "acting": 13,
                     "line": "planted faults caught: 13 of 13 at every width where they can act; calibrated 2026-12-07 "
                             "on engine eeeeeee"}


def test_a_record_whose_unchanged_build_failed_is_cited_as_failed() -> None:
    found, errors = derive_calibration(sealed(verdict="fail", reasons=["the unchanged build did not pass"]), RUN)
    assert errors == [] and found["state"] == "failed"
    assert found["line"] == "runner h200's latest calibration failed: the unchanged build did not pass"


def test_no_record_is_never_calibrated_and_names_other_runners_records() -> None:
    found, errors = derive_calibration(sealed(record=None, calibration=None, others=["sm86"]), RUN)
    assert errors == [] and found["state"] == "never" and found["record_sha256"] is None
    assert found["line"].startswith("runner h200 was never calibrated with these tiny models (no calibration record "
                                    "in /var/lib/ds4ci/calibrations matches it)")
    assert found["line"].endswith("records of other runners there are not this runner's (sm86)")


@pytest.mark.parametrize(("change", "words"), [
    ({"problems": ["it does not verify: calibration.json differs"]}, "it does not verify: calibration.json differs"),
    ({"runner": "sm86"}, "citation.json names runner 'sm86', but this run is runner h200's"),
    ({"pins": {**pins_of(RUN), "seed": 2}}, "the record calibrated other tiny models, prompts or settings"),
    ({"calibration": None}, "names record /var/lib/ds4ci/calibrations/x/record but no calibration of it"),
    ({"record": None, "calibration": None, "problems": ["gate.calibrations = x: expected an absolute path"]},
     "expected an absolute path"),
])
def test_a_refused_record_is_an_error_of_the_run_that_says_why(change: dict[str, Any], words: str) -> None:
    doc = sealed(**change)
    if change.get("runner") == "sm86":  # the sealed file's own runner, not the calibration's
        doc["runner"], doc["calibration"]["runner"] = "sm86", "h200"
    found, errors = derive_calibration(doc, RUN)
    assert found["state"] == "refused" and found["record_sha256"] is None
    assert words in found["line"] and errors and words in errors[0]


def test_a_calibration_of_another_runner_is_refused() -> None:
    doc = sealed()
    doc["calibration"]["runner"] = "sm86"
    found, errors = derive_calibration(doc, RUN)
    assert found["state"] == "refused" and "the record calibrated runner 'sm86', not h200" in errors[0]


def test_a_sealed_citation_that_is_not_an_object_is_malformed() -> None:
    with pytest.raises(ValueError, match=r"citation\.json: expected a JSON object, found list"):
        derive_calibration([], RUN)
