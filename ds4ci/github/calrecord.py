"""The record of which calibration each runner's verified bundle cites: an artifact name of the trusted run.

``merge.calibration_max_age_days`` must not rest on any text a pull request can write: a check run's summary
quotes what the pull request's processes did (a process name, a log line), and a workflow the pull request adds
can create a check run ``ds4ci/<runner>`` with its own token. So publish, in the trusted gate's run, writes the
day of each gate runner's cited calibration (its verified bundle's derived ``calibration``, state ``cited``: the
record the runner verified and sealed) as one artifact name, :func:`artifact_name`, and gate.yml's publish job
uploads an artifact of that name. Only a run's own jobs can upload its artifacts, so merge-check reads runner
R's calibration day only from the artifact names of the run that vouched for R's green (:func:`day_of`).

The name: ``ds4ci-calibrated--R1=YYYY-MM-DD--R2=YYYY-MM-DD`` (runners sorted). A runner name never holds
``=``, and a day is exactly ten characters, so the name reads back one way only.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError

PREFIX = "ds4ci-calibrated"
_DAY = 10  # YYYY-MM-DD


def _day(text: str) -> dt.date | None:
    """A calendar day written exactly as YYYY-MM-DD, else None."""
    if len(text) != _DAY or text[4] != "-" or text[7] != "-" or not text.replace("-", "").isdigit():
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def cited_days(runners: Iterable[tuple[str, str, Any]]) -> dict[str, str]:
    """Runner -> the day its bundle's sealed calibration finished, for every gate runner whose bundle cites one.
    ``runners``: (name, role, the derived ``calibration``) of each document whose bundle verified, names the
    runner table allows (no ``=``: the record's name reads back one way); only a gate runner's ``cited``
    calibration counts."""
    out: dict[str, str] = {}
    for runner, role, cal in runners:
        if role != "gate" or not isinstance(cal, dict) or cal.get("state") != "cited":
            continue
        day = str(cal.get("finished") or "")[:_DAY]
        if _day(day) is not None and runner and "=" not in runner:
            out[runner] = day
    return out


def artifact_name(days: Mapping[str, str]) -> str | None:
    """The artifact name that records ``days`` (runner -> YYYY-MM-DD); None where no runner cites one."""
    if not days:
        return None
    return PREFIX + "".join(f"--{runner}={days[runner]}" for runner in sorted(days))


def parse(name: str) -> dict[str, dt.date] | None:
    """Runner -> day of a record's artifact name; None where ``name`` is not exactly such a record."""
    if not name.startswith(PREFIX + "--"):
        return None
    out: dict[str, dt.date] = {}
    rest = name[len(PREFIX):]
    while rest:
        runner, eq, tail = rest[2:].partition("=")
        day = _day(tail[:_DAY])
        if not rest.startswith("--") or not eq or not runner or day is None or runner in out:
            return None
        out[runner] = day
        rest = tail[_DAY:]
    return out


def day_of(names: Iterable[str], runner: str, run: int) -> tuple[dt.date | None, str]:
    """The calibration day run ``run``'s record gives ``runner`` (its artifacts' ``names``), or None and why."""
    days = sorted({found[runner] for name in names if (found := parse(name)) is not None and runner in found})
    if not days:
        return None, (f"run {run}, which vouched for the gate, records no calibration of runner {runner} (no artifact "
                      f"{PREFIX}--{runner}=DAY: its verified bundle cites none, so the runner was never calibrated "
                      "with these tiny models, or its gate ran without gate.calibrations)")
    if len(days) > 1:
        return None, (f"run {run} records {len(days)} calibration days for runner {runner} "
                      f"({', '.join(d.isoformat() for d in days)}): which one is unclear; run the gate again")
    return days[0], f"run {run}'s record"


def write(path: Path, days: Mapping[str, str]) -> None:
    """One JSON line {"artifact": NAME or null, "calibrated": {runner: day}}: what gate.yml uploads by that name."""
    from ds4ci.fileio import write_text_atomic

    doc = {"artifact": artifact_name(days), "calibrated": dict(sorted(days.items()))}
    try:
        write_text_atomic(path, json.dumps(doc) + "\n")
    except OSError as exc:
        raise UsageError(f"--calibration-record {path}: cannot write it: {exc.strerror or exc}") from exc
