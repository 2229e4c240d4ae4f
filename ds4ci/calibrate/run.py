"""``ds4ci calibrate``: the unchanged build gated first, then every catalogued mutant; the sealed record.

Steps, each failing closed: the catalogue is read and every substitution found exactly once; the source
must be unmodified (git status) with no earlier change in flight; the unchanged source is built and gated
(if it does not pass, no mutant runs and the record says why); each mutant is applied, rebuilt, put back,
gated. The record (``OUT/record``) keeps every gate's own bundle and derives what was caught.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci import __version__
from ds4ci.calibrate import record
from ds4ci.calibrate.build import BuildPlan, require_models
from ds4ci.calibrate.catalogue import CONTROL, Catalogue, Mutant
from ds4ci.calibrate.cpusets import NONE, Slots
from ds4ci.calibrate.gates import BUNDLE, LiveGates, run_gate
from ds4ci.calibrate.loop import build_each, check_ready
from ds4ci.calibrate.observe import observe_gpu
from ds4ci.calibrate.workspace import Workspace, engine_commit, restoring_on_signals
from ds4ci.errors import NoVerdictError, UsageError

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


def last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "an empty log"


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
    slots = Slots(job.cpu_sets, job.jobs)
    if job.mutant_repeats is not None and job.mutant_repeats < 1:
        raise UsageError(f"--mutant-repeats must be at least 1, found {job.mutant_repeats}")
    prepare_out(job.out)
    started = _now()
    gates: dict[str, dict[str, Any]] = {}
    bundles: dict[str, Path] = {}
    live, lock = LiveGates(), threading.Lock()

    def one_gate(name: str, binary: Path) -> dict[str, Any]:
        work = job.out / "gates" / name
        extra = (*job.gate_args, *slots.gate_args())
        if name != CONTROL and job.mutant_repeats is not None:
            extra += ("--repeats", str(job.mutant_repeats))
        with slots.take() as cpus:
            row = run_gate(binary, config, job.runner, work, extra, cpus=cpus, live=live)
        with lock:
            gates[name] = {"exit_code": row["exit_code"], "wall_s": row["wall_s"], **slots.describe(cpus)}
            if (work / BUNDLE).is_file():
                bundles[name] = work / BUNDLE
        say(f"gated {name}: {row.get('verdict')} (exit {row['exit_code']}, {row['wall_s']} s"
            f"{'' if cpus is None else ', CPUs ' + str(gates[name]['cpus'])})")
        return row

    with concurrent.futures.ThreadPoolExecutor(max_workers=job.jobs) as pool:
        pending: list[concurrent.futures.Future[dict[str, Any]]] = []

        def gate(name: str, binary: Path, _built: dict[str, Any]) -> bool:
            if name != CONTROL and job.jobs > 1:  # side by side, while the next mutant builds
                pending.append(pool.submit(one_gate, name, binary))
                return True
            row = one_gate(name, binary)
            if name == CONTROL and name not in bundles:
                raise NoVerdictError(f"the unchanged build's gate left no evidence bundle (exit {row['exit_code']}): "
                                     f"{last_line(job.out / 'gates' / name / 'gate.log')}; see "
                                     f"{job.out / 'gates' / name / 'gate.log'}")
            return name != CONTROL or row.get("verdict") == "pass"

        try:
            builds = build_each(job.plan, job.source, job.out, chosen, gate, say)
            with restoring_on_signals(Workspace(job.source, job.out), say):
                for done in pending:
                    done.result()
        except BaseException:  # an interrupt or a failure: no further gate starts; those running stop and seal
            pool.shutdown(wait=False, cancel_futures=True)
            live.stop_all()
            raise
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
