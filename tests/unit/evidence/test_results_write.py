"""results.write_atomic validates every document it writes and returns the text; the validator is shared."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from paths import TESTS

from ds4ci.errors import ResultsError
from ds4ci.evidence import results

PASS = json.loads((TESTS / "data" / "results" / "pass.json").read_text())


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = results.validate

    def counted(doc: Any, source: str = "results") -> results.Results:
        seen.append(doc)
        return real(doc, source)

    monkeypatch.setattr(results, "validate", counted)
    return seen


def test_write_atomic_validates_and_returns_the_text_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    doc = copy.deepcopy(PASS)
    text = results.write_atomic(tmp_path / "evidence.json", doc)
    assert len(seen) == 1
    assert (tmp_path / "evidence.json").read_text(encoding="utf-8") == text == results.dumps(doc)
    assert results.load(tmp_path / "evidence.json") == doc


def test_a_changed_document_is_validated_again_and_an_invalid_one_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _counting(monkeypatch)
    doc = copy.deepcopy(PASS)
    results.write_atomic(tmp_path / "first.json", doc)
    doc["verdict"] = "maybe"  # not in the schema's enum
    with pytest.raises(ResultsError, match="verdict"):
        results.write_atomic(tmp_path / "second.json", doc)
    assert len(seen) == 2
    assert not (tmp_path / "second.json").exists()


def test_not_json_serialisable_is_still_a_results_error(tmp_path: Path) -> None:
    doc = copy.deepcopy(PASS)
    doc["timings"]["total_s"] = float("nan")
    with pytest.raises((ResultsError, ValueError)):
        results.write_atomic(tmp_path / "nan.json", doc)
    assert not (tmp_path / "nan.json").exists()


def test_preload_builds_the_one_validator_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_VALIDATOR", [])
    started: list[str] = []
    real = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    results.preload()
    assert started == ["ds4ci-results-schema"]
    built = results._validator()  # waits for the background build if it is still running
    assert results._VALIDATOR[:] == [built]
    assert results._validator() is built
    assert results.validate(copy.deepcopy(PASS)) == PASS
