"""Running external probes (``nvidia-smi``, ``rocminfo``, file reads) under one hard deadline.

A wedged ROCm runner can leave ``rocminfo`` in uninterruptible sleep (D state): it ignores
every signal, SIGKILL included, until the kernel lets go, so ``wait()`` on it can block for the
rest of the job. Hence every probe here:

- runs under ``ds4ci.supervisor`` (own process group, PID namespace where the kernel allows)
  with stdout/stderr going to anonymous temporary files, so nobody has to drain a pipe and a
  grandchild holding the output open cannot hang us;
- is waited on only until the shared deadline; then it and everything it started get SIGKILL,
  and if it still has not exited after a short grace it is *abandoned*: a daemon thread waits
  for it, sweeps what is left, and we report ``timeout`` and go on;
- is started from its own daemon thread, so even a hang inside ``exec`` (a binary on a stuck
  mount) or a file read from a stuck sysfs node cannot hold the caller past the deadline.

All probes run concurrently, so the whole batch takes at most about ``deadline + grace`` however
many of them are stuck. Output read back is bounded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from ds4ci import supervisor

ProbeStatus = Literal["ok", "missing", "timeout", "failed"]

DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
DEFAULT_KILL_GRACE_S = 1.0
_POLL_S = 0.02
_TEXT_LIMIT = 4000


@dataclass(frozen=True)
class ProbeSpec:
    """One probe: run ``argv`` (a command) or read ``path`` (a file); exactly one is set.

    ``argv[0]`` is looked up on PATH, then in ``fallback_dirs`` (ROCm and CUDA do not always put
    their tools on PATH).
    """

    name: str
    argv: tuple[str, ...] = ()
    path: Path | None = None
    fallback_dirs: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if bool(self.argv) == (self.path is not None):
            raise ValueError(f"probe {self.name!r}: expected exactly one of argv or path")


@dataclass(frozen=True)
class ProbeResult:
    name: str
    status: ProbeStatus
    stdout: str
    stderr: str
    returncode: int | None
    elapsed_s: float
    detail: str
    truncated: bool = False


Killer = Callable[[supervisor.Child], None]


def kill_child(child: supervisor.Child) -> None:
    """SIGKILL a probe and everything it started."""
    child.kill()


def resolve(command: str, env: Mapping[str, str], fallback_dirs: Sequence[Path]) -> str | None:
    """The executable for ``command``: PATH of ``env`` first, then the fallback directories."""
    if os.sep in command:
        return command if os.access(command, os.X_OK) and Path(command).is_file() else None
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found:
        return found
    for directory in fallback_dirs:
        candidate = directory / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _read_bounded(fh: IO[bytes], limit: int) -> tuple[str, bool]:
    fh.seek(0)
    data = fh.read(limit + 1)
    truncated = len(data) > limit
    return data[:limit].decode("utf-8", errors="replace"), truncated


def _tail(text: str, limit: int = _TEXT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _finish(child: supervisor.Child, grace_s: float) -> None:
    """Sweep what the probe left; hand it to a daemon thread if something ignores SIGKILL."""
    try:
        child.sweep(kill_wait_s=grace_s)
    except supervisor.Unkillable:
        child.abandon()


def _run_command(
    spec: ProbeSpec,
    env: Mapping[str, str],
    end: float,
    grace_s: float,
    max_bytes: int,
    killer: Killer,
    sup: supervisor.Supervisor,
) -> ProbeResult:
    started = time.monotonic()
    exe = resolve(spec.argv[0], env, spec.fallback_dirs)
    if exe is None:
        return ProbeResult(spec.name, "missing", "", "", None, 0.0, f"{spec.argv[0]} not found on PATH")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = sup.spawn(
                [exe, *spec.argv[1:]], env=env, stdout=out, stderr=err, start_timeout=max(0.0, end - started)
            )
        except FileNotFoundError:
            return ProbeResult(spec.name, "missing", "", "", None, 0.0, f"{exe} vanished before it could start")
        except supervisor.StartTimeout:
            elapsed = time.monotonic() - started
            detail = f"{spec.argv[0]} did not even start within {elapsed:.1f} s; killed"
            return ProbeResult(spec.name, "timeout", "", "", None, elapsed, detail)
        except (OSError, supervisor.SupervisorError) as exc:
            return ProbeResult(spec.name, "failed", "", "", None, 0.0, f"could not start {exe}: {exc}")
        code = child.wait(max(0.0, end - time.monotonic()))
        elapsed = time.monotonic() - started
        if code is None:
            killer(child)
            gone = child.wait(grace_s) is not None
            stdout, cut_out = _read_bounded(out, max_bytes)
            stderr, cut_err = _read_bounded(err, max_bytes)
            if gone:
                _finish(child, grace_s)
                detail = f"{spec.argv[0]} did not answer within {elapsed:.1f} s; killed"
            else:
                child.abandon()
                detail = (
                    f"{spec.argv[0]} did not answer within {elapsed:.1f} s and survived SIGKILL "
                    f"(pid {child.pid}, probably uninterruptible sleep in the driver); abandoned"
                )
            return ProbeResult(spec.name, "timeout", stdout, stderr, None, elapsed, detail, cut_out or cut_err)
        _finish(child, grace_s)
        stdout, cut_out = _read_bounded(out, max_bytes)
        stderr, cut_err = _read_bounded(err, max_bytes)
    if code == 0:
        return ProbeResult(spec.name, "ok", stdout, stderr, 0, elapsed, "exit 0", cut_out or cut_err)
    why = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    detail = f"{spec.argv[0]}: {why}" + (f": {_tail(stderr or stdout, 500)}" if (stderr or stdout).strip() else "")
    return ProbeResult(spec.name, "failed", stdout, stderr, code, elapsed, detail, cut_out or cut_err)


def _read_file(spec: ProbeSpec, max_bytes: int) -> ProbeResult:
    assert spec.path is not None  # guaranteed by ProbeSpec.__post_init__
    started = time.monotonic()
    try:
        with spec.path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return ProbeResult(spec.name, "missing", "", "", None, 0.0, f"{spec.path} does not exist")
    except OSError as exc:
        return ProbeResult(spec.name, "failed", "", "", None, 0.0, f"cannot read {spec.path}: {exc.strerror or exc}")
    elapsed = time.monotonic() - started
    text = data[:max_bytes].decode("utf-8", errors="replace")
    return ProbeResult(spec.name, "ok", text, "", 0, elapsed, f"read {spec.path}", len(data) > max_bytes)


def _check(specs: Sequence[ProbeSpec], deadline_s: float) -> None:
    if deadline_s <= 0:
        raise ValueError(f"deadline must be a positive number of seconds, found {deadline_s}")
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"probe names must be unique, found {names}")


def _abandoned(spec: ProbeSpec, elapsed_s: float, deadline_s: float) -> ProbeResult:
    """The result of a probe whose worker never returned (stuck in exec or in a read)."""
    what = " ".join(spec.argv) if spec.argv else str(spec.path)
    detail = f"{what} did not even start or finish reading within {deadline_s:g} s; abandoned"
    return ProbeResult(spec.name, "timeout", "", "", None, elapsed_s, detail)


def run_probes(
    specs: Sequence[ProbeSpec],
    deadline_s: float,
    *,
    env: Mapping[str, str] | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    killer: Killer = kill_child,
    progress: Callable[[str], None] | None = None,
    sup: supervisor.Supervisor | None = None,
) -> dict[str, ProbeResult]:
    """Run all probes concurrently; return one result per probe name within ~deadline + grace.

    ``killer`` is the SIGKILL step; tests replace it to stand in for a process that the kernel
    will not let die (D state), which cannot be produced on demand. ``sup`` is the supervisor
    (default: the process-wide one).
    """
    _check(specs, deadline_s)
    environ = dict(os.environ if env is None else env)
    runner = sup or supervisor.default()
    started = time.monotonic()
    end = started + deadline_s
    results: dict[str, ProbeResult] = {}
    lock = threading.Lock()

    def work(spec: ProbeSpec) -> None:
        if spec.path is not None:
            result = _read_file(spec, max_output_bytes)
        else:
            result = _run_command(spec, environ, end, kill_grace_s, max_output_bytes, killer, runner)
        with lock:
            results[spec.name] = result
        if progress is not None and result.status == "timeout":
            progress(f"probe {spec.name}: {result.detail}")

    threads = [threading.Thread(target=work, args=(spec,), name=f"probe-{spec.name}", daemon=True) for spec in specs]
    for thread in threads:
        thread.start()
    # The workers enforce the deadline themselves; this outer bound only matters when a worker
    # is stuck where it cannot check the clock (exec of a binary on a hung mount, a sysfs read).
    join_until = end + kill_grace_s + 0.5
    for thread in threads:
        thread.join(max(0.0, join_until - time.monotonic()))
    with lock:
        done = dict(results)
    for spec in specs:
        if spec.name not in done:
            done[spec.name] = _abandoned(spec, time.monotonic() - started, deadline_s)
            if progress is not None:
                progress(f"probe {spec.name}: {done[spec.name].detail}")
    return {spec.name: done[spec.name] for spec in specs}
