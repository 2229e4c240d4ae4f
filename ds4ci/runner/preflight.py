"""Is this runner ready to run the gate? Files, stale overrides, evidence dir, GPU health.

``check_ready`` is the cheap, file-only part the gate also calls before starting any server;
``preflight`` adds the pins (every pinned file hashed, through the hash cache where trusted) and the
fingerprint (GPU health with a hard deadline) and yields one report.
A missing tool is only recorded; a real problem (not ready, unhealthy, a probe that hangs)
makes the runner not ready, which the CLI turns into exit 3. A GPU held by a process that is not
ours makes the runner "busy" (``ds4ci.runner.busy``); ``busy_wait_s`` waits for it to become free.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.options.config import DEFAULT_STALE_OVERRIDE_FILES, GateConfig, under_actions
from ds4ci.records import FingerprintRecord
from ds4ci.runner import busy
from ds4ci.runner.fingerprint import fingerprint
from ds4ci.runner.gpus import gpu_problems
from ds4ci.supervisor import sandbox

__all__ = ["PreflightReport", "check_ready", "fingerprint", "preflight", "render_table"]

_SNIPPET_BYTES = 64


@dataclass(frozen=True)
class PreflightReport:
    runner: str
    problems: tuple[str, ...]
    fingerprint: FingerprintRecord
    busy: dict[str, Any] | None = None  # ds4ci.runner.busy record, set only when the runner ended busy
    sandbox: str | None = None  # None: PR code would run under bubblewrap here; else why not

    @property
    def ready(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        doc = {
            "runner": self.runner,
            "ready": self.ready,
            "problems": list(self.problems),
            "fingerprint": self.fingerprint,
        }
        if self.busy is not None:
            doc["busy"] = self.busy
        doc["sandbox"] = {"available": self.sandbox is None, "detail": self.sandbox or "bubblewrap runs here"}
        return doc


def stale_override_problems(paths: Iterable[Path]) -> list[str]:
    """Each override file present is a problem: the server reads it at start-up and silently
    changes its speculation policy, so the arms would not run the policy the gate set."""
    problems = []
    for path in paths:
        if not (path.exists() or path.is_symlink()):
            continue
        try:
            with path.open("rb") as fh:
                snippet = fh.read(_SNIPPET_BYTES).decode("utf-8", errors="replace").strip()
            seen = f"containing {snippet!r}"
        except OSError as exc:
            seen = f"unreadable: {exc.strerror or exc}"
        problems.append(
            f"stale override file {path} is present ({seen}); the server reads it at start-up and it "
            f"silently changes the speculation policy: expected no such file, remove it (rm {path})"
        )
    return problems


def model_file_problems(config: GateConfig) -> list[str]:
    """Pinned inputs must be readable regular files (the server binary also executable)."""
    if config.role != "gate":
        return []  # a negative-control runner runs extra checks only, with no models
    problems = []
    # With [build], the server binary does not exist yet: the gate builds it first.
    built_later = () if config.build is not None else (config.server_bin,)
    for item in (*built_later, config.target, config.draft, *config.prompts):
        path = item.path
        if path == Path():
            problems.append(f"{item.role}: no path configured; expected a file")
            continue
        try:
            if not path.is_file():
                what = "a directory" if path.is_dir() else "missing" if not path.exists() else "not a regular file"
                problems.append(f"{item.role} file {path}: expected a readable regular file, found {what}")
                continue
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            problems.append(f"{item.role} file {path}: expected a readable file, found it unreadable ({exc.strerror or exc})")
            continue
    server = config.server_bin.path
    started = config.build is None and not config.simulator  # the simulator's entry is run by ds4ci's Python
    if started and server != Path() and server.is_file() and not os.access(server, os.X_OK):
        problems.append(f"server binary {server}: expected an executable file, found it not executable (chmod +x)")
    return problems


def pin_problems(config: GateConfig, progress: Callable[[str], None] | None = None) -> list[str]:
    """Every pinned input hashed (through the hash cache where the config trusts it) and compared with its pin.

    Only when every file is present (``model_file_problems`` said nothing): the gate hashes them again
    anyway, so "ready" means the files are the pinned ones, not only that they exist."""
    from ds4ci.errors import Ds4ciError
    from ds4ci.runner.identity import identify

    if config.role != "gate":
        return []
    files = [*([] if config.build is not None else [config.server_bin]), config.target, config.draft, *config.prompts]
    try:
        identify(files, cache_path=config.hash_cache_path, use_cache=config.hash_cache,
                 progress=progress or (lambda _message: None))
    except Ds4ciError as exc:
        return [str(exc)]
    return []


def evidence_dir_problems(path: Path) -> list[str]:
    """The evidence directory must exist writable, or be creatable; nothing is left behind."""
    if path.exists():
        if not path.is_dir():
            return [f"evidence dir {path}: expected a directory, found a file"]
        try:
            fd, probe = tempfile.mkstemp(prefix=".ds4ci-preflight-", dir=path)
            os.close(fd)
            Path(probe).unlink()
        except OSError as exc:
            return [f"evidence dir {path}: expected a writable directory, cannot create a file in it ({exc.strerror or exc})"]
        return []
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return [f"evidence dir {path}: cannot be created, {ancestor} is not a directory"]
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return [f"evidence dir {path}: cannot be created, {ancestor} is not writable"]
    return []


def check_ready(config: GateConfig) -> list[str]:
    """Problems that make this runner not ready for ``config``; [] when ready. Files only, fast."""
    return [
        *model_file_problems(config),
        *stale_override_problems(config.stale_override_files),
        *evidence_dir_problems(config.evidence_dir),
    ]


def health_problems(fp: FingerprintRecord) -> list[str]:
    """A hung or failing GPU stack is a problem; no GPU tool at all ("unknown") is not."""
    health = fp["health"]
    if health["status"] == "timeout":
        return [
            f"GPU health: a probe did not answer within the deadline ({health['detail']}); the GPU "
            "runtime may be wedged (a process stuck in uninterruptible sleep needs a reboot of the "
            "runner host); no verdict can be reached here"
        ]
    if health["status"] == "unhealthy":
        return [f"GPU health: unhealthy: {health['detail']}"]
    return []


def preflight(
    config: GateConfig | None,
    runner: str | None,
    deadline_s: float,
    progress: Callable[[str], None] | None = None,
    busy_wait_s: float = 0.0,
) -> PreflightReport:
    """Readiness of this runner: ``check_ready`` (or only the default stale overrides without a
    config) plus the fingerprint, whose probes are bounded by ``deadline_s``, plus the busy check
    (waiting up to ``busy_wait_s`` for a foreign GPU process to go, unless already not ready)."""
    if config is not None:
        name = runner or config.runner
        problems = check_ready(config)
        if not model_file_problems(config):
            problems = [*problems, *pin_problems(config, progress)]
    else:
        name = runner or socket.gethostname()
        problems = stale_override_problems(Path(p) for p in DEFAULT_STALE_OVERRIDE_FILES)
    fp = fingerprint(deadline_s, progress)
    problems = [*problems, *health_problems(fp), *gpu_problems(config.gpu if config else (), fp, name)]
    outcome = busy.wait_until_free(
        lambda: busy.detect(deadline_s), runner=name, busy_wait_s=0.0 if problems else busy_wait_s,
        progress=progress or (lambda _message: None),
    )
    problems += outcome.problems()
    why = sandbox.refusal()
    required = config.sandbox.require if config is not None else under_actions()
    if why is not None and required:
        problems.append(f"sandbox: [sandbox] require = true, but {why}")
    return PreflightReport(name, tuple(problems), fp, outcome.record() if outcome.busy else None, why)


def render_table(report: PreflightReport) -> str:
    """The human view: verdict first, then identity, then problems with what to do."""
    fp = report.fingerprint
    lines = [f"runner     {report.runner}", f"ready      {'yes' if report.ready else 'NO'}"]
    lines.append(f"health     {fp['health']['status']}: {fp['health']['detail']}")
    lines.append("sandbox    " + ("yes (bubblewrap)" if report.sandbox is None else f"NO: {report.sandbox}"))
    if fp["gpus"]:
        for i, gpu in enumerate(fp["gpus"]):
            mem = f"{gpu['memory_mib']} MiB" if gpu.get("memory_mib") is not None else "memory ?"
            lines.append(
                f"gpu {i:<6} {gpu['vendor']} | {gpu['name']} | {gpu.get('arch') or 'arch ?'} | {mem} | "
                f"driver {gpu.get('driver') or '?'}"
            )
    else:
        lines.append("gpu        none found")
    for section in ("toolchain", "host"):
        for key, value in fp[section].items():
            lines.append(f"{section:<10} {key:<14} {value if value is not None else '-'}")
    lines.append("probes     " + ", ".join(f"{k}={v}" for k, v in fp["probes"].items()))
    if report.busy is not None:
        lines.extend(f"busy       pid {p['pid']} {p['name']}, {p['memory_mib'] if p['memory_mib'] is not None else '?'} MiB, "
                     f"user {p['user'] or '?'}" for p in report.busy["processes"])
    if report.problems:
        lines.append("problems:")
        lines.extend(f"  - {problem}" for problem in report.problems)
    return "\n".join(lines) + "\n"
