"""One gate run for the service: private checkout, ``ds4ci gate`` as a child process, outputs, request record.

The gate is the gate: the service runs ``python -I -m ds4ci gate`` (this install, isolated from the
working directory and ``PYTHON*`` variables) with the trusted branch's config, its own evidence folder,
its own key, its state folder named as out of every config path's reach (``--service-state``) and the
sandbox required, so PR code never runs unsandboxed as the user that can read the key. Its exit
code is the answer's. What the request asked, who asked (the peer's credentials), the config's
digest and commit and the outputs' digests go into a request record under ``STATE/requests``,
written once and never replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from ds4ci.errors import EXIT_ERROR, EXIT_USAGE, Ds4ciError
from ds4ci.service.checkout import Prepared, Trusted, prepare
from ds4ci.service.protocol import PROTOCOL, GateRequest

# Process groups of the gates running now, so a stopping service can stop them (they keep their evidence).
RUNNING: set[int] = set()
MAX_LOG: Final = 4 * 1024 * 1024  # the gate's stdout/stderr sent back: the last this many bytes
STOP_GRACE_S: Final = 30.0


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    signing_key: Path
    trusted: Trusted  # where the gate's config comes from: the tip of this branch, never the caller's choice
    config_path: str = "ds4ci.toml"
    gate_timeout_s: float = 3 * 3600.0
    keep_work: bool = False


@dataclass(frozen=True)
class Peer:
    """SO_PEERCRED of the connection: who asked (the kernel's word, not the caller's)."""

    pid: int
    uid: int
    gid: int


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str | None
    files: tuple[tuple[str, Path], ...]  # (name, path) to send back, in order
    record: Path
    work: Path


def request_id(number: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}-{number}"


def gate_argv(settings: Settings, request: GateRequest, prepared: Prepared, out: Path) -> list[str]:
    argv = [sys.executable, "-I", "-m", "ds4ci", "gate", "--config", str(prepared.config),
            "--runner", request.runner, "--evidence-dir", str(settings.state_dir / "evidence"),
            "--results-out", str(out / "results.json"), "--bundle-out", str(out / "bundle.tar.gz"),
            "--source-dir", str(prepared.source), "--base-ref", request.base,
            "--signing-key", str(settings.signing_key), "--service-state", str(settings.state_dir)]
    if request.widths is not None:
        argv += ["--widths", ",".join(str(q) for q in request.widths)]
    if prepared.note is not None:
        argv += ["--note", prepared.note]
    return argv


def gate_env() -> dict[str, str]:
    """The service's own environment (set by whoever installed it, never by a caller), the sandbox required.

    ``GITHUB_ACTIONS`` is left out: the service's gate is no job, and signs with a key no job can read."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_") and k != "GITHUB_ACTIONS"}
    env["DS4CI_CONTAINMENT"] = "sandbox"
    return env


def _run_gate(argv: list[str], cwd: Path, out: Path, timeout_s: float) -> tuple[int, str | None]:
    with (out / "gate.stdout").open("wb") as stdout, (out / "gate.stderr").open("wb") as stderr:
        proc = subprocess.Popen(argv, cwd=cwd, env=gate_env(), stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr, start_new_session=True)
        RUNNING.add(proc.pid)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the gate keeps the evidence of an interrupted run
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return EXIT_ERROR, f"the gate ran past the service's --gate-timeout of {timeout_s:.0f} s and was stopped"
        finally:
            RUNNING.discard(proc.pid)
    if code not in (0, 1, 2, 3):
        return EXIT_ERROR, f"the gate ended with status {code} (killed?); no verdict"
    return code, None


def stop_running() -> None:
    """SIGTERM to every running gate (the service is stopping): each keeps the evidence of its attempt."""
    for pgid in list(RUNNING):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)


def _tail(path: Path) -> Path:
    """``path``, or a copy of its last MAX_LOG bytes when it is longer."""
    size = path.stat().st_size
    if size <= MAX_LOG:
        return path
    tail = path.with_suffix(path.suffix + ".tail")
    with path.open("rb") as src, tail.open("wb") as dst:
        src.seek(size - MAX_LOG)
        dst.write(f"[the first {size - MAX_LOG} bytes are left out]\n".encode())
        shutil.copyfileobj(src, dst)
    return tail


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_record(state_dir: Path, rid: str, doc: dict[str, Any]) -> Path:
    folder = state_dir / "requests"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{rid}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)  # never replaced
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return path


def run(settings: Settings, request: GateRequest, peer: Peer, number: int, received: float) -> Outcome:
    """The whole gate for one request; every failure becomes an exit code and a message, never an exception."""
    rid = request_id(number)
    work = settings.state_dir / "work" / rid
    work.mkdir(mode=0o700, parents=True)
    out = work / "out"
    out.mkdir(mode=0o700)
    record: dict[str, Any] = {"protocol": PROTOCOL, "id": rid, "peer": asdict(peer), "request": request.doc(),
                              "received": received, "started": time.time(), "config_path": settings.config_path}
    code, message, argv = EXIT_ERROR, None, None
    try:
        prepared = prepare(request, work, settings.config_path, settings.trusted)
        record.update(config_sha256=prepared.config_sha256, config_commit=prepared.config_commit, note=prepared.note)
        argv = gate_argv(settings, request, prepared, out)
        code, message = _run_gate(argv, prepared.config.parent, out, settings.gate_timeout_s)
    except Ds4ciError as exc:
        code, message = exc.exit_code, str(exc)
    except OSError as exc:
        code, message = EXIT_ERROR, f"the service could not prepare the run: {exc}"
    files = tuple((name, path) for name, path in (
        ("results", out / "results.json"), ("bundle", out / "bundle.tar.gz"),
        ("stdout", out / "gate.stdout"), ("stderr", out / "gate.stderr")) if path.is_file())
    files = tuple((name, _tail(path) if name in ("stdout", "stderr") else path) for name, path in files)
    record.update(finished=time.time(), exit_code=code, message=message, gate_argv=argv,
                  outputs={name: _sha256(path) for name, path in files if name in ("results", "bundle")})
    if code == EXIT_USAGE and argv is None:
        record["refused"] = True
    return Outcome(code, message, files, write_record(settings.state_dir, rid, record), work)


def clean(outcome: Outcome, keep: bool) -> None:
    """The private checkout and build outputs go once the answer is sent (the evidence and record stay)."""
    if not keep:
        shutil.rmtree(outcome.work, ignore_errors=True)
