"""One gate on one built binary: ``python -m ds4ci gate`` (this interpreter, wherever ds4ci is importable), with
the tiny models' config, its own evidence folder and its bundle.

Run as a subprocess, as a user runs it: no ``ds4ci`` script beside the interpreter is needed (a
``pip install --target`` has none).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ds4ci.calibrate.cpusets import pinned

GATE_TIMEOUT_S = 1800.0
STOP_GRACE_S = 120.0
BUNDLE = "bundle.tar.gz"
RESULTS = "results.json"


def gate_argv(binary: Path, config: Path, runner: str, work: Path, extra: Sequence[str]) -> list[str]:
    """The gate's command line, every path absolute (it runs in ``work``)."""
    binary, config, work = binary.resolve(), config.resolve(), work.resolve()
    return [sys.executable, "-m", "ds4ci", "gate", "--config", str(config), "--server-bin", str(binary),
            "--runner", runner, "--evidence-dir", str(work / "evidence"), "--results-out", str(work / RESULTS),
            "--bundle-out", str(work / BUNDLE), *extra]


class LiveGates:
    """The gates running in other threads, for the thread that was interrupted to stop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.add(proc)
            if self.stopping:  # started as the others were being stopped: it stops too
                proc.terminate()

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.discard(proc)

    def stop_all(self) -> None:
        """SIGTERM every live gate at once (each stops its servers and seals), then wait for each as ``stop`` does."""
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            stop(proc)


def run_gate(binary: Path, config: Path, runner: str, work: Path, extra: Sequence[str] = (),
             timeout_s: float = GATE_TIMEOUT_S, cpus: Sequence[int] | None = None,
             live: LiveGates | None = None) -> dict[str, Any]:
    """The gate's exit code, wall time and a short reading of its results.json (``widths`` by q); ``cpus``: the gate
    and its servers run on those CPUs only (``ds4ci.calibrate.cpusets``); ``live``: where a gate run in another
    thread is registered while it runs."""
    work.mkdir(parents=True, exist_ok=False)  # never over earlier evidence
    t0 = time.perf_counter()
    with (work / "gate.log").open("wb") as fh:
        proc = subprocess.Popen(pinned(gate_argv(binary, config, runner, work, extra), cpus), stdout=fh,
                                stderr=subprocess.STDOUT, cwd=work)
        if live is not None:
            live.add(proc)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(proc)
            code = None
        except BaseException:  # an interrupt of the calibration: the gate stops its servers as on its own SIGTERM
            stop(proc)
            raise
        finally:
            if live is not None:
                live.discard(proc)
    row: dict[str, Any] = {"exit_code": code, "wall_s": round(time.perf_counter() - t0, 1), "results": str(work / RESULTS)}
    try:
        doc = json.loads((work / RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        row.update(verdict="no results", error=f"{work / RESULTS}: {exc}")
        return row
    row.update(verdict=doc.get("verdict"), widths=width_rows(doc), reasons=doc.get("reasons", [])[:3],
               gate_s=(doc.get("timings") or {}).get("total_s"))
    return row


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, the gate's grace to stop its servers and seal, then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def first_difference(width: dict[str, Any]) -> int | None:
    firsts = [p["mismatch"]["position"] for p in width.get("prompts", []) if isinstance(p.get("mismatch"), dict)]
    return min(firsts) if firsts else None


def width_rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per width of a results document: its verdict, the first differing position, matched/offered per prompt."""
    widths = {}
    for w in doc.get("widths", []):
        accepted = [f"{p['matched']}/{p['offered']}" for p in w.get("prompts", [])
                    if isinstance(p.get("matched"), int) and isinstance(p.get("offered"), int)]
        widths[str(w["q"])] = {"verdict": w["verdict"], "first_difference": first_difference(w),
                               "matched_offered": accepted, "reasons": w.get("reasons", [])[:2]}
    return widths
