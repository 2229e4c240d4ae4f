"""Which calibration a report cites: the latest record of the same runner with the same tiny models and prompts.

Records are searched in a folder (``--calibrations DIR``): the folder itself, or any folder below it (up
to :data:`DEPTH` levels) that holds a ``calibration.json``. Only the latest matching one is cited, and only
after it verifies (its files against its manifest, ``calibration.json`` derived again from every gate's
own bundle); a runner with none is reported as never calibrated, in those words.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ds4ci.calibrate.derive import CALIBRATION
from ds4ci.calibrate.record import is_record, verify_record
from ds4ci.evidence.citation import cited_line, never_line, pins_of, same_pins
from ds4ci.judging import strictjson

DEPTH = 3


def records_under(folder: Path, skip: Sequence[Path] = ()) -> list[Path]:
    """Each folder at most :data:`DEPTH` levels below ``folder`` (itself included) that is a record. No link is
    followed (a linked folder or ``calibration.json`` is passed over), and nothing in a folder of ``skip`` (the
    trees pull-request code writes) is looked at."""
    avoid = {Path(os.path.realpath(t)) for t in skip}
    found: list[Path] = []
    level = [folder]
    for _depth in range(DEPTH + 1):
        below: list[Path] = []
        for here in level:
            if Path(os.path.realpath(here)) in avoid:
                continue
            try:
                entries = sorted(os.scandir(here), key=lambda e: e.name)
            except OSError:
                continue
            names = {e.name: e for e in entries}
            cal = names.get(CALIBRATION)
            if cal is not None and cal.is_file(follow_symlinks=False) and is_record(here):
                found.append(here)
            below += [here / e.name for e in entries if e.is_dir(follow_symlinks=False)]
        level = below
    return sorted(set(found))


def _claimed(path: Path) -> dict[str, Any] | None:
    try:
        doc = strictjson.loads((path / CALIBRATION).read_bytes(), CALIBRATION)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def matches(record: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    """The record calibrated this results document's runner with the same tiny models, prompts and settings."""
    return record.get("runner") == results["runner"]["name"] and same_pins(record.get("pins") or {}, pins_of(results))


def age_days(doc: Mapping[str, Any], now: dt.datetime | None = None) -> float | None:
    try:
        when = dt.datetime.strptime(str(doc.get("finished")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    return ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds() / 86400


def citation(doc: Mapping[str, Any]) -> str:
    return cited_line(str(doc["summary"]["line"]), str(doc.get("finished", "")), str((doc.get("engine") or {}).get("commit", "")))


def latest_record(folder: Path, results: Mapping[str, Any], skip: Sequence[Path] = ()) -> tuple[Path | None, list[str]]:
    """The latest record under ``folder`` that claims ``results``' runner and pins (None: none), and the runners of
    the records there that claim another runner (never cited for this one). ``skip``: folders never looked in."""
    claims = [(d, p) for p in records_under(folder, skip) if (d := _claimed(p)) is not None]
    claimed = [(d, p) for d, p in claims if matches(d, results)]
    others = sorted({str(d.get("runner")) for d, _ in claims if d.get("runner") != results["runner"]["name"]})
    if not claimed:
        return None, others
    return max(claimed, key=lambda item: str(item[0].get("finished")))[1], others


def cite(folder: Path, results: Mapping[str, Any]) -> str:
    """One line for a runner's report: the latest matching calibration, or plainly that there is none."""
    runner = results["runner"]["name"]
    path, _others = latest_record(folder, results)
    if path is None:
        return never_line(runner, str(folder), [])
    check = verify_record(path)
    if not check.intact or check.doc is None:
        return (f"runner {runner}'s latest calibration ({path.name}) does not verify ({'; '.join(check.problems[:2])}): "
                "treat the runner as never calibrated")
    if check.doc["verdict"] != "pass":
        return f"runner {runner}'s latest calibration failed: {check.doc['reasons'][0]}"
    return citation(check.doc)


def cite_all(folder: Path | None, docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Runner name -> its citation, for every gate runner among ``docs``: the one its verified bundle sealed
    (``calibration``, ``gate.calibrations``), else the latest record in ``folder`` (none without a folder)."""
    out: dict[str, str] = {}
    for d in docs:
        if d["runner"].get("role", "gate") != "gate":
            continue
        if isinstance(d.get("calibration"), dict):
            out[d["runner"]["name"]] = str(d["calibration"]["line"])
        elif folder is not None:
            out[d["runner"]["name"]] = cite(folder, d)
    return out
