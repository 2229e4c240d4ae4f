"""Where and when each arm's server ran, read from its sealed lifecycle.json: ``results.json`` ``arms``.

The gate records ``device`` (what the server got as --target-device), ``started_at`` and
``finished_at`` (UTC, to the millisecond) in every lifecycle record, for a sequential and a parallel
run alike. Evidence of a ds4ci that recorded none of them has no ``arms`` (None here), so its
bundles still verify; one lifecycle with them and another without, or a value of another shape, is
not evidence the gate writes: EvidenceError (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci.judging.judge import LIFECYCLE, SERVERS, EvidenceError, load_lifecycle
from ds4ci.records import ArmPlacement

FIELDS = ("device", "started_at", "finished_at")
_PATTERNS = {
    "device": (re.compile(r"^[a-z]+:\d+$"), "a device like cuda:0"),
    "started_at": (re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$"), "a UTC time"),
    "finished_at": (re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$"), "a UTC time"),
}


def _field(life: dict[str, Any], name: str, where: str) -> str:
    value = life.get(name)
    pattern, what = _PATTERNS[name]
    if not isinstance(value, str) or not pattern.match(value):
        raise EvidenceError(f"{where}: {name} must be {what}, found {str(value)[:80]!r}")
    return value


def arm_placements(attempt: Path, keys: Sequence[tuple[str, int | None]]) -> list[ArmPlacement] | None:
    """Every arm of ``keys`` (server key, width) whose server folder exists, in that order; None when no
    lifecycle records a placement (evidence of an earlier ds4ci)."""
    lives = [(key, q, load_lifecycle(attempt, key)) for key, q in keys if (attempt / SERVERS / key).is_dir()]
    recorded = [any(f in life for f in FIELDS) for _, _, life in lives]
    if not any(recorded):
        return None
    found: list[ArmPlacement] = []
    for key, q, life in lives:
        where = f"{SERVERS}/{key}/{LIFECYCLE}"
        found.append({"key": key, "q": q, "device": _field(life, "device", where),
                      "started_at": _field(life, "started_at", where), "finished_at": _field(life, "finished_at", where)})
    return found
