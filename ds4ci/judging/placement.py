"""Where and when each arm's server ran, read from its sealed lifecycle.json: ``results.json`` ``arms``.

The gate records ``device`` (what the server got as --target-device), ``started_at`` and
``finished_at`` (UTC, to the millisecond) in every lifecycle record, for a sequential and a parallel
run alike; evidence of a ds4ci that did not record them reads as null. A value of another shape is
not evidence the gate writes: EvidenceError (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci.judging.judge import LIFECYCLE, SERVERS, EvidenceError, load_lifecycle
from ds4ci.records import ArmPlacement

_DEVICE = re.compile(r"^[a-z]+:\d+$")
_INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")


def _field(life: dict[str, Any], name: str, pattern: re.Pattern[str], where: str) -> str | None:
    value = life.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise EvidenceError(f"{where}: {name} must be {'a device like cuda:0' if name == 'device' else 'a UTC time'} "
                            f"or absent, found {str(value)[:80]!r}")
    return value


def arm_placements(attempt: Path, keys: Sequence[tuple[str, int | None]]) -> list[ArmPlacement]:
    """Every arm of ``keys`` (server key, width) whose server folder exists, in that order."""
    found: list[ArmPlacement] = []
    for key, q in keys:
        if not (attempt / SERVERS / key).is_dir():
            continue
        life, where = load_lifecycle(attempt, key), f"{SERVERS}/{key}/{LIFECYCLE}"
        found.append({
            "key": key, "q": q, "device": _field(life, "device", _DEVICE, where),
            "started_at": _field(life, "started_at", _INSTANT, where),
            "finished_at": _field(life, "finished_at", _INSTANT, where),
        })
    return found
