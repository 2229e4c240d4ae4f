"""Which calibration a report cites: the latest record of the same runner with the same tiny models and prompts.

Records are searched in a folder (``--calibrations DIR``): the folder itself, or any folder below it (up
to :data:`DEPTH` levels) that holds a ``calibration.json``. Only the latest matching one is cited, and only
after it verifies (its files against its manifest, ``calibration.json`` derived again from every gate's
own bundle); a runner with none is reported as never calibrated, in those words.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ds4ci.calibrate.derive import CALIBRATION, pins_of
from ds4ci.calibrate.record import is_record, verify_record
from ds4ci.judging import strictjson

DEPTH = 3
MATCHED = ("target_sha256", "draft_sha256", "prompt_sha256s", "max_tokens", "seed", "repeats")


def records_under(folder: Path) -> list[Path]:
    found = []
    for depth in range(DEPTH + 1):
        found += [p.parent for p in folder.glob("/".join(["*"] * depth + [CALIBRATION])) if is_record(p.parent)]
    return sorted(set(found))


def _claimed(path: Path) -> dict[str, Any] | None:
    try:
        doc = strictjson.loads((path / CALIBRATION).read_bytes(), CALIBRATION)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def matches(record: Mapping[str, Any], results: Mapping[str, Any]) -> bool:
    """The record calibrated this results document's runner with the same tiny models, prompts and settings."""
    pins, want = record.get("pins") or {}, pins_of(results)
    return record.get("runner") == results["runner"]["name"] and all(pins.get(k) == want[k] for k in MATCHED)


def age_days(doc: Mapping[str, Any], now: dt.datetime | None = None) -> float | None:
    try:
        when = dt.datetime.strptime(str(doc.get("finished")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    return ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds() / 86400


CITED = re.compile(r"calibrated (\d{4}-\d{2}-\d{2}) on engine [0-9a-f]{1,40}")


def cited_day(text: str) -> dt.date | None:
    """The day of the calibration a report cites (:func:`citation`'s words), None where it cites none."""
    found = CITED.search(text)
    try:
        return dt.date.fromisoformat(found.group(1)) if found else None
    except ValueError:
        return None


def citation(doc: Mapping[str, Any]) -> str:
    day = str(doc.get("finished", ""))[:10]
    engine = str((doc.get("engine") or {}).get("commit", ""))[:7]
    return f"{doc['summary']['line']}; calibrated {day} on engine {engine}"


def cite(folder: Path, results: Mapping[str, Any]) -> str:
    """One line for a runner's report: the latest matching calibration, or plainly that there is none."""
    runner = results["runner"]["name"]
    claimed = [(d, p) for p in records_under(folder) if (d := _claimed(p)) is not None and matches(d, results)]
    if not claimed:
        return (f"runner {runner} was never calibrated with these tiny models (no calibration record in {folder} "
                "matches it): how strong the gate's proof is here is not measured")
    _doc, path = max(claimed, key=lambda item: str(item[0].get("finished")))
    check = verify_record(path)
    if not check.intact or check.doc is None:
        return (f"runner {runner}'s latest calibration ({path.name}) does not verify ({'; '.join(check.problems[:2])}): "
                "treat the runner as never calibrated")
    if check.doc["verdict"] != "pass":
        return f"runner {runner}'s latest calibration failed: {check.doc['reasons'][0]}"
    return citation(check.doc)


def cite_all(folder: Path | None, docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Runner name -> its citation, for every gate runner among ``docs`` ({} without a folder)."""
    if folder is None:
        return {}
    return {d["runner"]["name"]: cite(folder, d) for d in docs if d["runner"].get("role", "gate") == "gate"}
