"""A gate outcome writes results.json elsewhere as the evidence's validated text, not validated twice."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from paths import TESTS

from ds4ci.errors import ResultsError
from ds4ci.evidence import results
from ds4ci.gate.run import GateOutcome

PASS = json.loads((TESTS / "data" / "results" / "pass.json").read_text())


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = results.validate

    def counted(doc: Any, source: str = "results") -> results.Results:
        seen.append(doc)
        return real(doc, source)

    monkeypatch.setattr(results, "validate", counted)
    return seen


def test_results_out_is_the_evidence_text_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    doc = copy.deepcopy(PASS)
    text = results.write_atomic(tmp_path / "evidence.json", doc)
    GateOutcome(doc, 0, text).write_results(tmp_path / "results-out.json")
    assert len(seen) == 1  # validated when the evidence was written, not again
    assert (tmp_path / "results-out.json").read_bytes() == (tmp_path / "evidence.json").read_bytes()


def test_without_evidence_text_the_document_is_validated_before_it_is_written(tmp_path: Path) -> None:
    doc = copy.deepcopy(PASS)
    doc["verdict"] = "maybe"  # not in the schema's enum
    with pytest.raises(ResultsError, match="verdict"):
        GateOutcome(doc, 0, None).write_results(tmp_path / "results-out.json")
    assert not (tmp_path / "results-out.json").exists()
