"""``results.validate`` runs the schema once per distinct document: a document equal, as exact JSON, to one
found valid before is valid without a second run; anything else (a changed value, a tuple where the schema
wants an array, ``false`` where it wants an integer, an invalid document seen before) is validated again."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from typing import Any

import pytest
from paths import TESTS

from ds4ci.errors import ResultsError
from ds4ci.evidence import results

PASS = json.loads((TESTS / "data" / "results" / "pass.json").read_text())


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every document the schema itself is run on, from an empty memo."""
    monkeypatch.setattr(results, "_VALID", OrderedDict())
    validator, seen = results._validator(), []

    class Counting:
        def iter_errors(self, doc: Any) -> Any:
            seen.append(doc)
            return validator.iter_errors(doc)

    monkeypatch.setattr(results, "_validator", Counting)
    return seen


def test_an_equal_document_is_not_validated_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    assert results.validate(copy.deepcopy(PASS)) == PASS
    assert results.validate(json.loads(json.dumps(PASS))) == PASS  # another object, the same JSON
    assert len(runs) == 1


@pytest.mark.parametrize("change", ["a tuple for an array", "false for an integer", "a changed value"])
def test_a_document_that_differs_from_a_valid_one_is_validated_again(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    runs = _runs(monkeypatch)
    results.validate(copy.deepcopy(PASS))
    doc = copy.deepcopy(PASS)
    if change == "a tuple for an array":
        doc["widths"] = tuple(doc["widths"])  # the same JSON text, but not an array to the schema
    elif change == "false for an integer":
        doc["exit_code"] = False  # False == 0 in Python, `false` is not an integer in JSON
    else:
        doc["verdict"] = "maybe"
    with pytest.raises(ResultsError, match="schema violation"):
        results.validate(doc)
    assert len(runs) == 2


def test_an_invalid_document_is_refused_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    doc = copy.deepcopy(PASS)
    doc["verdict"] = "maybe"
    for _ in range(2):
        with pytest.raises(ResultsError, match="verdict"):
            results.validate(doc)
    assert len(runs) == 2


def test_a_document_changed_after_it_validated_is_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    doc = copy.deepcopy(PASS)
    results.validate(doc)
    doc["reasons"] = [{"not": "a reason"}]
    with pytest.raises(ResultsError):
        results.validate(doc)
    assert len(runs) == 2


def test_the_memo_keeps_only_the_newest_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    monkeypatch.setattr(results, "_VALID_MAX", 3)
    docs = [{**copy.deepcopy(PASS), "ds4ci_version": f"0.0.{n}"} for n in range(4)]
    for doc in docs:
        results.validate(doc)
    assert len(results._VALID) == 3
    results.validate(docs[-1])  # kept
    results.validate(docs[0])  # the oldest, dropped: validated again
    assert len(runs) == len(docs) + 1
