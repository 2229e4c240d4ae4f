"""Is another process using this runner's GPU? Three sources, one answer, an optional wait.

- ``nvidia-smi --query-compute-apps`` lists every CUDA process on the GPU, of any user;
- ``rocm-smi --showpids`` lists every process with a KFD (ROCm compute) context;
- a scan of ``/proc/<pid>/fd`` finds processes holding ``/dev/kfd`` or ``/dev/nvidia*`` open
  (psutil's ``open_files()`` lists regular files only, so the fd links are read directly). A
  holder counts as a compute user when it holds ``/dev/kfd`` or ``/dev/nvidia-uvm``, which every
  CUDA context opens; processes holding only ``/dev/nvidia0``/``nvidiactl`` (display servers,
  ``nvidia-persistenced``) are not counted. Without root the scan sees only this user's processes.

"Ours" is ds4ci's own process tree (this process and its descendants); anything else holding
the GPU makes the runner busy. The tools run as bounded probes (``ds4ci.runner.probes``): a tool that
is missing, fails or hangs leaves a note (the fingerprint's health check already judges the
tool), but output that cannot be parsed is a problem: it is never read as "idle".
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ds4ci.options.config import read_section
from ds4ci.options.values import wait_seconds
from ds4ci.runner.probes import ProbeResult, ProbeSpec, run_probes

NVIDIA_APPS_FIELDS = ("pid", "process_name", "used_gpu_memory", "gpu_uuid")
NVIDIA_APPS_QUERY = (
    "nvidia-smi",
    "--query-compute-apps=" + ",".join(NVIDIA_APPS_FIELDS),
    "--format=csv,noheader,nounits",
)
ROCM_SMI_PIDS = ("rocm-smi", "--showpids")
DEVICE_PATTERNS = ("/dev/kfd", "/dev/nvidia*")
COMPUTE_NODES = ("/dev/kfd", "/dev/nvidia-uvm")
HEARTBEAT_S = 15.0
_NVIDIA_IDLE = "no running processes found"
_ROCM_IDLE = "No KFD PIDs currently running"
_UNKNOWN = {"", "[n/a]", "n/a", "unknown", "[not supported]", "[insufficient permissions]"}
_MIB = 1024 * 1024


class BusyParseError(ValueError):
    """A GPU tool's process list did not have the documented shape."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    memory_mib: int | None = None
    gpu: str | None = None
    user: str | None = None
    sources: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"pid {self.pid} {self.name}"]
        if self.memory_mib is not None:
            parts.append(f"{self.memory_mib} MiB")
        if self.user:
            parts.append(f"user {self.user}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "memory_mib": self.memory_mib, "gpu": self.gpu,
                "user": self.user, "sources": list(self.sources)}


@dataclass(frozen=True)
class Holder:
    """A process with GPU device nodes open, from the /proc scan."""

    pid: int
    name: str
    user: str | None
    nodes: tuple[str, ...]


# ----- parsers (pure) --------------------------------------------------------------------------


def _memory_mib(value: str, where: str) -> int | None:
    text = value.strip()
    if text.lower() in _UNKNOWN:
        return None
    number = text[:-3].strip() if text.endswith("MiB") else text
    if not number.isdigit():
        raise BusyParseError(f"{where}: expected used_gpu_memory in MiB (e.g. 1634 or '1634 MiB'), found {value!r}")
    return int(number)


def _pid(value: str, where: str) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise BusyParseError(f"{where}: expected a process id, found {value!r}")
    return int(text)


def parse_nvidia_compute_apps(text: str, fields: Sequence[str] = NVIDIA_APPS_FIELDS) -> list[GpuProcess]:
    """``nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory[,gpu_uuid]
    --format=csv[,noheader][,nounits]``. A header line, if present, names the columns; without
    one, ``fields`` does. A process name may itself contain commas."""
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].strip().lower() == _NVIDIA_IDLE:
        return []
    columns = list(fields)
    if lines and lines[0].strip().lower().startswith("pid"):
        columns = [part.split("[")[0].strip().lower() for part in lines.pop(0).split(",")]
    for needed in ("pid", "process_name", "used_gpu_memory"):
        if needed not in columns:
            raise BusyParseError(f"nvidia-smi compute apps: expected a {needed} column, found columns {columns}")
    name_at = columns.index("process_name")
    out = []
    for number, line in enumerate(lines, 1):
        where = f"nvidia-smi compute apps line {number} {line.strip()!r}"
        parts = [part.strip() for part in line.split(",")]
        extra = len(parts) - len(columns)
        if extra < 0:
            raise BusyParseError(f"{where}: expected {len(columns)} comma-separated fields ({', '.join(columns)}), "
                                 f"found {len(parts)}")
        # Commas inside the process name: its field absorbs the surplus.
        parts[name_at: name_at + extra + 1] = [", ".join(parts[name_at: name_at + extra + 1])]
        row = dict(zip(columns, parts, strict=True))
        gpu = row.get("gpu_uuid") or None
        out.append(GpuProcess(_pid(row["pid"], where), row["process_name"] or "?",
                              _memory_mib(row["used_gpu_memory"], where), gpu, None, ("nvidia-smi",)))
    return out


def parse_rocm_showpids(text: str) -> list[GpuProcess]:
    """``rocm-smi --showpids``: a "PID PROCESS NAME GPU(s) VRAM USED SDMA USED CU OCCUPANCY"
    table (cells padded and tab-separated, VRAM in bytes, UNKNOWN where not supported) between
    "=" rules, or the line "No KFD PIDs currently running"."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.split()[:3] == ["PID", "PROCESS", "NAME"]), None)
    idle = any(line.strip() == _ROCM_IDLE for line in lines)
    if header is None:
        if idle:
            return []
        raise BusyParseError(
            f"rocm-smi --showpids: expected a 'PID PROCESS NAME ...' table or {_ROCM_IDLE!r}, found "
            f"{text.strip()[:300]!r}"
        )
    if idle:
        raise BusyParseError(f"rocm-smi --showpids: both a process table and {_ROCM_IDLE!r}: ambiguous")
    out = []
    for line in lines[header + 1:]:
        if not line.strip() or line.lstrip().startswith("="):
            break
        where = f"rocm-smi --showpids row {line.strip()!r}"
        cells = line.split()
        if len(cells) < 6:
            raise BusyParseError(f"{where}: expected PID, PROCESS NAME, GPU(s), VRAM USED, SDMA USED, CU OCCUPANCY")
        pid, name, vram = _pid(cells[0], where), " ".join(cells[1:-4]), cells[-3]
        if vram.upper() in {"UNKNOWN", "N/A"}:
            memory = None
        elif vram.isdigit():
            memory = round(int(vram) / _MIB)
        else:
            raise BusyParseError(f"{where}: expected VRAM USED in bytes or UNKNOWN, found {vram!r}")
        out.append(GpuProcess(pid, name, memory, None, None, ("rocm-smi",)))
    return out


def compute_holders(holders: Iterable[Holder], compute_nodes: Sequence[str] = COMPUTE_NODES) -> list[GpuProcess]:
    """Holders of a compute node (/dev/kfd, /dev/nvidia-uvm); the rest are display or daemon use."""
    return [
        GpuProcess(h.pid, h.name, None, None, h.user, ("proc",))
        for h in holders
        if any(node in compute_nodes for node in h.nodes)
    ]


# ----- the live system -------------------------------------------------------------------------


def scan_device_holders(patterns: Sequence[str] = DEVICE_PATTERNS) -> list[Holder]:
    """Every readable process holding a file descriptor whose link matches ``patterns``."""
    import psutil

    out = []
    for proc in psutil.process_iter(["pid", "name", "username"]):
        fd_dir = Path(psutil.PROCFS_PATH) / str(proc.pid) / "fd"
        try:
            entries = list(fd_dir.iterdir())
        except OSError:  # another user's process (not root), or it just exited
            continue
        nodes = set()
        for entry in entries:
            try:
                target = str(entry.readlink())
            except OSError:
                continue
            if any(fnmatch.fnmatchcase(target, pattern) for pattern in patterns):
                nodes.add(target)
        if nodes:
            out.append(Holder(proc.pid, str(proc.info.get("name") or "?"), proc.info.get("username"), tuple(sorted(nodes))))
    return out


def own_tree() -> set[int]:
    """This process and all its descendants: ds4ci's own processes."""
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    with contextlib.suppress(psutil.Error):
        pids.update(child.pid for child in me.children(recursive=True))
    return pids


def _user_of(pid: int) -> str | None:
    import psutil

    try:
        return str(psutil.Process(pid).username())
    except (psutil.Error, KeyError):  # gone, another PID namespace, or a uid without a name
        return None


@dataclass(frozen=True)
class BusyCheck:
    """One look: foreign GPU processes, notes on sources that could not answer, parse problems."""

    processes: tuple[GpuProcess, ...] = ()
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def combine(
    found: Iterable[GpuProcess], own: set[int], user_of: Callable[[int], str | None] = _user_of
) -> tuple[GpuProcess, ...]:
    """One entry per foreign pid: tools' name and memory first, sources merged, user filled in."""
    merged: dict[int, GpuProcess] = {}
    for proc in found:
        if proc.pid in own:
            continue
        have = merged.get(proc.pid)
        if have is None:
            merged[proc.pid] = proc
            continue
        merged[proc.pid] = replace(
            have,
            memory_mib=have.memory_mib if have.memory_mib is not None else proc.memory_mib,
            gpu=have.gpu or proc.gpu,
            user=have.user or proc.user,
            sources=tuple(dict.fromkeys((*have.sources, *proc.sources))),
        )
    return tuple(
        replace(p, user=p.user or user_of(p.pid)) for p in sorted(merged.values(), key=lambda p: p.pid)
    )


def _rocm_bin(env: Mapping[str, str]) -> tuple[Path, ...]:
    return (Path(env.get("ROCM_PATH") or "/opt/rocm") / "bin",)


def _from_probe(result: ProbeResult, parser: Callable[[str], list[GpuProcess]], what: str,
                notes: list[str], problems: list[str]) -> list[GpuProcess]:
    if result.status == "missing":
        return []
    if result.status != "ok":
        notes.append(f"{what}: {result.detail}; the processes it would list are unknown")
        return []
    try:
        return parser(result.stdout)
    except BusyParseError as exc:
        problems.append(f"busy check: {what} answered something unexpected: {exc}")
        return []


def detect(deadline_s: float, *, env: Mapping[str, str] | None = None,
           scan: Callable[[], list[Holder]] = scan_device_holders) -> BusyCheck:
    """Look once, with every tool bounded by ``deadline_s``."""
    environ = dict(os.environ if env is None else env)
    results = run_probes(
        [ProbeSpec("nvidia-smi-apps", argv=NVIDIA_APPS_QUERY),
         ProbeSpec("rocm-smi-pids", argv=ROCM_SMI_PIDS, fallback_dirs=_rocm_bin(environ))],
        deadline_s, env=environ,
    )
    notes: list[str] = []
    problems: list[str] = []
    found = _from_probe(results["nvidia-smi-apps"], parse_nvidia_compute_apps, "nvidia-smi --query-compute-apps",
                        notes, problems)
    found += _from_probe(results["rocm-smi-pids"], parse_rocm_showpids, "rocm-smi --showpids", notes, problems)
    found += compute_holders(scan())
    if os.geteuid() != 0:
        notes.append("the /proc scan sees only this user's processes (not root); nvidia-smi and rocm-smi list the others")
    return BusyCheck(combine(found, own_tree()), tuple(notes), tuple(problems))


# ----- waiting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BusyOutcome:
    runner: str
    busy_wait_s: float
    waited_s: float
    checks: int
    last: BusyCheck = field(default_factory=BusyCheck)

    @property
    def busy(self) -> bool:
        return bool(self.last.processes)

    def problems(self) -> list[str]:
        out = list(self.last.problems)
        if self.busy:
            waited = (f"waited {self.waited_s:.0f} s of busy_wait {self.busy_wait_s:g} s" if self.busy_wait_s > 0
                      else "busy_wait is 0: not waited")
            out.append(
                f"runner busy: {self.runner} is in use by {describe(self.last.processes)} ({waited}); no gate was "
                "started: run again when it is free, or set busy_wait to wait for it"
            )
        return out

    def record(self) -> dict[str, Any]:
        """The machine-readable record (preflight JSON ``busy``): a later status can be pending."""
        return {
            "busy": self.busy,
            "runner": self.runner,
            # The words of a pending status: the runner is occupied, not broken.
            "summary": f"waiting: {self.runner} busy ({describe(self.last.processes)})"[:140] if self.busy else "",
            "busy_wait_s": self.busy_wait_s,
            "waited_s": round(self.waited_s, 1),
            "checks": self.checks,
            "processes": [p.to_json() for p in self.last.processes],
            "notes": list(self.last.notes),
        }


def describe(processes: Sequence[GpuProcess]) -> str:
    return "; ".join(p.describe() for p in processes)


def wait_until_free(
    check: Callable[[], BusyCheck],
    *,
    runner: str,
    busy_wait_s: float,
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> BusyOutcome:
    """Look; while busy and within ``busy_wait_s``, look again every few seconds, saying so every
    ``heartbeat_s``. A parse problem ends the wait at once (waiting cannot fix it)."""
    start = clock()
    result = check()
    checks = 1
    deadline = start + max(busy_wait_s, 0.0)
    poll = poll_s if poll_s is not None else min(5.0, max(busy_wait_s / 4, 0.1))
    last_beat: float | None = None
    while result.processes and not result.problems and busy_wait_s > 0:
        now = clock()
        if now >= deadline:
            break
        if last_beat is None or now - last_beat >= heartbeat_s:
            progress(f"waiting: {runner} busy ({describe(result.processes)}); {deadline - now:.0f} s left of "
                     f"busy_wait {busy_wait_s:g} s")
            last_beat = now
        sleep(min(poll, deadline - now))
        result = check()
        checks += 1
        if not result.processes:
            progress(f"{runner} is free after {clock() - start:.0f} s")
    return BusyOutcome(runner, busy_wait_s, clock() - start, checks, result)


parse_busy_wait = wait_seconds  # the checker of preflight.busy_wait in the options table


def load_busy_wait(config: Path) -> float | None:
    """``[preflight] busy_wait`` of a ds4ci.toml; None when not set."""
    table = read_section(config, "preflight")
    return parse_busy_wait(table["busy_wait"], "preflight.busy_wait") if "busy_wait" in table else None
