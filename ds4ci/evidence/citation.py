"""The calibration a gate cites, as ``results.json`` ``calibration``: derived from its sealed ``citation.json``.

The gate, on its runner, looks for the runner's latest calibration record where the trusted config says
(``gate.calibrations``), verifies it (files against its manifest, ``calibration.json`` derived again, the
signature by this runner's key, the same runner name) and seals what it found as ``citation.json``
(``ds4ci.calibrate.citing``). This module turns that sealed file into the ``calibration`` field, checked
against the rest of the derived document: the runner's name and the tiny config's pins must be this run's.

States: ``cited`` (a record that verifies, whose calibration passed), ``failed`` (it verifies, but the
unchanged build did not pass its own gate), ``never`` (the folder holds no record of this runner with these
tiny models) and ``refused`` (the latest such record does not verify, or does not belong to this run):
refused is an error of the run, never a silent omission.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ds4ci.records import CalibrationCitation

CITATION = "citation.json"
MATCHED = ("target_sha256", "draft_sha256", "prompt_sha256s", "max_tokens", "seed", "repeats")
STATES = ("cited", "failed", "never", "refused")


def pins_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The tiny config's pins a gate ran with (its results): what a report matches a calibration by."""
    ids, settings = doc["identities"], doc["settings"]
    return {"target_sha256": (ids.get("target") or {}).get("sha256"), "draft_sha256": (ids.get("draft") or {}).get("sha256"),
            "prompt_sha256s": [p["sha256"] for p in ids.get("prompts", [])], "widths": settings.get("widths"),
            "max_tokens": settings.get("max_tokens"), "seed": settings.get("seed"), "repeats": settings.get("repeats")}


def same_pins(pins: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return all(pins.get(k) == want[k] for k in MATCHED)


def cited_line(summary: str, finished: str, engine_commit: str) -> str:
    """The words a report cites (for people: merge-check reads the day from ``ds4ci.github.calrecord``, never here)."""
    return f"{summary}; calibrated {finished[:10]} on engine {engine_commit[:7]}"


def never_line(runner: str, folder: str, others: list[str]) -> str:
    line = (f"runner {runner} was never calibrated with these tiny models (no calibration record in {folder} "
            "matches it): how strong the gate's proof is here is not measured")
    if others:
        line += f"; records of other runners there are not this runner's ({', '.join(sorted(set(others))[:5])})"
    return line


def refused_line(runner: str, record: str, problems: list[str]) -> str:
    return (f"runner {runner}'s latest calibration record ({record}) is refused: {'; '.join(problems[:3])}; "
            "treat the runner as never calibrated")


def _text(value: Any, limit: int = 4096) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _texts(value: Any) -> list[str]:
    return [_text(v, 1000) for v in value if isinstance(v, str)][:20] if isinstance(value, list) else []


def _empty(state: Any, line: str) -> CalibrationCitation:
    return {"state": state, "line": line, "record_sha256": None, "finished": None, "engine_commit": None,
            "caught": None, "acting": None}


def derive_calibration(sealed: Any, doc: Mapping[str, Any]) -> tuple[CalibrationCitation, list[str]]:
    """The ``calibration`` field of ``doc`` (its head already derived) from the sealed citation; the run's errors."""
    if not isinstance(sealed, dict):
        raise ValueError(f"{CITATION}: expected a JSON object, found {type(sealed).__name__}")
    runner = doc["runner"]["name"]
    folder, record = _text(sealed.get("folder")), sealed.get("record")
    record = _text(record) if isinstance(record, str) else None
    if sealed.get("runner") != runner:
        problem = f"{CITATION} names runner {_text(sealed.get('runner'), 100)!r}, but this run is runner {runner}'s"
        return _empty("refused", refused_line(runner, record or folder, [problem])), [problem]
    problems = _texts(sealed.get("problems"))
    cited = sealed.get("calibration")
    if record is None:
        if problems:  # the folder itself could not be read
            line = refused_line(runner, folder, problems)
            return _empty("refused", line), [line]
        return _empty("never", never_line(runner, folder, _texts(sealed.get("others")))), []
    if not problems and not isinstance(cited, dict):
        problems = [f"{CITATION} names record {record} but no calibration of it"]
    if not problems:
        assert isinstance(cited, dict)
        pins = cited["pins"] if isinstance(cited.get("pins"), dict) else {}
        if cited.get("runner") != runner:
            problems.append(f"the record calibrated runner {_text(cited.get('runner'), 100)!r}, not {runner}")
        elif (doc["identities"].get("target") is not None) and not same_pins(pins, pins_of(doc)):
            problems.append("the record calibrated other tiny models, prompts or settings than this run's")
    if problems:
        line = refused_line(runner, record, problems)
        return _empty("refused", line), [line]
    assert isinstance(cited, dict)
    verdict, reasons = _text(cited.get("verdict"), 20), _texts(cited.get("reasons"))
    finished, engine = _text(cited.get("finished"), 40), _text(cited.get("engine_commit"), 40)
    if verdict == "pass":
        state: Any = "cited"
        line = cited_line(_text(cited.get("summary"), 1000), finished, engine)
    else:
        state = "failed"
        line = f"runner {runner}'s latest calibration failed: {reasons[0] if reasons else 'verdict ' + verdict}"
    return {"state": state, "line": line, "record_sha256": _text(cited.get("sha256"), 64) or None,
            "finished": finished or None, "engine_commit": engine or None, "caught": _int(cited.get("caught")),
            "acting": _int(cited.get("acting"))}, []
