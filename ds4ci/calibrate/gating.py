"""The gates of a calibration: the unchanged build's first and alone, then the mutants', ``jobs`` at a time.

A mutant's gate starts as soon as its binary is kept (while the next mutant builds), on a CPU set of its own
where ``cpu_sets`` says (:mod:`ds4ci.calibrate.cpusets`). An interrupt or a failure starts no further gate and
stops those running (each stops its servers and seals), then is raised.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.calibrate.catalogue import CONTROL
from ds4ci.calibrate.cpusets import Slots
from ds4ci.calibrate.gates import BUNDLE, LiveGates, run_gate
from ds4ci.errors import NoVerdictError, UsageError


@dataclass(frozen=True)
class GateJob:
    config: Path
    runner: str
    out: Path
    gate_args: tuple[str, ...]
    jobs: int
    cpu_sets: str
    mutant_repeats: int | None


def last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "an empty log"


class Gating:
    """Runs the gates and keeps what the record needs: ``gates`` (how each ran) and ``bundles`` (by name)."""

    def __init__(self, job: GateJob, say: Callable[[str], None]) -> None:
        if job.mutant_repeats is not None and job.mutant_repeats < 1:
            raise UsageError(f"--mutant-repeats must be at least 1, found {job.mutant_repeats}")
        self.job, self.say, self.slots = job, say, Slots(job.cpu_sets, job.jobs)
        self.gates: dict[str, dict[str, Any]] = {}
        self.bundles: dict[str, Path] = {}
        self.live, self.lock = LiveGates(), threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=job.jobs)
        self.pending: list[concurrent.futures.Future[dict[str, Any]]] = []

    def one(self, name: str, binary: Path) -> dict[str, Any]:
        job, work = self.job, self.job.out / "gates" / name
        extra = (*job.gate_args, *self.slots.gate_args())
        if name != CONTROL and job.mutant_repeats is not None:
            extra += ("--repeats", str(job.mutant_repeats))
        with self.slots.take() as cpus:
            row = run_gate(binary, job.config, job.runner, work, extra, cpus=cpus, live=self.live)
        ran = {"exit_code": row["exit_code"], "wall_s": row["wall_s"], **self.slots.describe(cpus)}
        with self.lock:
            self.gates[name] = ran
            if (work / BUNDLE).is_file():
                self.bundles[name] = work / BUNDLE
        on = "" if cpus is None else f", CPUs {ran['cpus']}"
        self.say(f"gated {name}: {row.get('verdict')} (exit {row['exit_code']}, {row['wall_s']} s{on})")
        return row

    def on_built(self, name: str, binary: Path, _built: dict[str, Any]) -> bool:
        """The build loop's callback: False once the unchanged build did not pass (nothing else counts)."""
        if name != CONTROL and self.job.jobs > 1:  # side by side, while the next mutant builds
            self.pending.append(self.pool.submit(self.one, name, binary))
            return True
        row = self.one(name, binary)
        if name == CONTROL and name not in self.bundles:
            log = self.job.out / "gates" / name / "gate.log"
            raise NoVerdictError(f"the unchanged build's gate left no evidence bundle (exit {row['exit_code']}): "
                                 f"{last_line(log)}; see {log}")
        return name != CONTROL or row.get("verdict") == "pass"

    def wait(self) -> None:
        """Every gate submitted, to its end."""
        for done in self.pending:
            done.result()
        self.pool.shutdown(wait=True)

    def stop(self) -> None:
        """No further gate starts; those running stop and seal."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.live.stop_all()
