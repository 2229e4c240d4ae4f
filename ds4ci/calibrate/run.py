"""``ds4ci calibrate``: the unchanged build gated first, then every catalogued mutant; the sealed record.

Steps, each failing closed: the catalogue is read and every substitution found exactly once; the source
must be unmodified (git status) with no earlier change in flight; the unchanged source is built and gated
(if it does not pass, no mutant runs and the record says why); each mutant is applied, rebuilt, put back,
gated. The record (``OUT/record``) keeps every gate's own bundle and derives what was caught.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.calibrate import record
from ds4ci.calibrate.build import BuildPlan, require_models
from ds4ci.calibrate.catalogue import CONTROL, Catalogue, Mutant
from ds4ci.calibrate.cpusets import NONE
from ds4ci.calibrate.gating import GateJob, Gating
from ds4ci.calibrate.loop import build_each, check_ready
from ds4ci.calibrate.observe import observe_gpu
from ds4ci.calibrate.workspace import Workspace, engine_commit, restoring_on_signals
from ds4ci.errors import UsageError

RECORD = "record"


@dataclass(frozen=True)
class Calibration:
    plan: BuildPlan
    source: Path
    models: Path
    runner: str
    out: Path
    key: Path | None
    gate_args: tuple[str, ...] = ()
    jobs: int = 1  # mutants' gates side by side (the unchanged build's always runs alone, first)
    cpu_sets: str = NONE  # ds4ci.calibrate.cpusets.LEVERS
    mutant_repeats: int | None = None  # the mutants' gates with this many repeats (None: the config's)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out}: expected a new or empty folder for the calibration, found one with files "
                         "(never written over; an interrupted run's folder is for --restore)")
    out.mkdir(parents=True, exist_ok=True)


def calibrate(job: Calibration, catalogue: Catalogue, chosen: Sequence[Mutant], say: Callable[[str], None]) -> int:
    """0: the record is written and the unchanged build passed; 1: it did not pass (the record says why)."""
    config = require_models(job.models)
    commit = engine_commit(job.source)
    check_ready(job.source, job.out, chosen)
    gating = Gating(GateJob(config, job.runner, job.out, job.gate_args, job.jobs, job.cpu_sets, job.mutant_repeats),
                    say)
    prepare_out(job.out)
    started = _now()
    try:
        builds = build_each(job.plan, job.source, job.out, chosen, gating.on_built, say)
        with restoring_on_signals(Workspace(job.source, job.out), say):
            gating.wait()
    except BaseException:  # an interrupt or a failure: no further gate starts; those running stop and seal
        gating.stop()
        raise
    gates, bundles = gating.gates, gating.bundles
    for name, built in builds.items():
        if "error" in built:
            gates[name] = {"error": built["error"]}
    inputs = {"schema": "ds4ci/calibration-inputs/v1", "runner": job.runner, "gpu": observe_gpu(),
              "engine": {"commit": commit, "source": str(job.source), "build": job.plan.describe()},
              "ds4ci_version": __version__, "started": started, "finished": _now(),
              "catalogue_path": str(catalogue.path.resolve()), "models_config": str(config), "builds": builds, "gates": gates,
              "side_by_side": {"jobs": job.jobs, "cpu_sets": job.cpu_sets}, "mutant_repeats": job.mutant_repeats}
    doc = record.seal(job.out / RECORD, inputs, catalogue.path.read_bytes(), bundles, job.key)
    (job.out / "calibration.txt").write_text("\n".join(table(doc)) + "\n", encoding="utf-8")
    say("\n".join(table(doc)))
    say(f"record: {job.out / RECORD} ({'signed' if job.key else 'not signed: no runner key'})")
    return 0 if doc["verdict"] == "pass" else 1


def _cell(row: dict[str, Any]) -> tuple[str, str, str]:
    widths = row["widths"]
    if not widths:
        return f"not judged ({row['verdict']}: {row['why'][:80]})", "-", "-"
    caught = ",".join(f"q={w['q']}" for w in widths if w["caught"]) or "none"
    equivalent = ",".join(f"q={w['q']}" for w in widths if not w["acts"]) or "-"
    firsts = [w["first_difference"] for w in widths if w["first_difference"] is not None]
    return caught, equivalent, str(min(firsts)) if firsts else "-"


def table(doc: dict[str, Any]) -> list[str]:
    """The record as a Markdown table: one row per mutant."""
    lines = [f"calibration of runner {doc['runner']} on engine {str(doc['engine']['commit'])[:7]}: {doc['summary']['line']}",
             "| mutant | caught at | equivalent at | first difference | gate |", "| --- | --- | --- | --- | --- |"]
    control = doc["control"]
    lines.append(f"| {CONTROL} | {control['verdict']} | - | - | {control['gate_s']} s |")
    for row in doc["mutants"]:
        caught, equivalent, first = _cell(row)
        lines.append(f"| {row['name']} | {caught} | {equivalent} | {first} | {row['gate_s']} s |")
    return lines


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True)
