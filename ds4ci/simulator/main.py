"""``ds4ci-sim``: start-up, readiness and shutdown of the simulated server.

Order of start-up, like the real binary: parse flags (exit 2), read the environment and load the
model files (exit 1 on anything the real server would refuse), bind exactly host:port (exit 1 if
taken), answer 503 until the simulated load time has passed, then 200 on /health. SIGTERM or
SIGINT stop it cleanly with exit 0 unless the ignore-sigterm fault is on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ds4ci import __version__
from ds4ci.errors import Ds4ciError
from ds4ci.simulator.engine import Engine
from ds4ci.simulator.http import SimServer
from ds4ci.simulator.logs import Log
from ds4ci.simulator.settings import SimSettings, load_settings, parse_args


class _Stop(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler to unwind into a clean exit."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # Ignore further signals while unwinding, so cleanup is not interrupted halfway.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Stop(signum)


def _describe(settings: SimSettings, log: Log) -> None:
    a = settings.args
    log.line(f"ds4ci-sim {__version__} (protocol double of the DS4 server), pid {os.getpid()}")
    log.line(
        f"load_model: target {a.target} sha256={settings.target_sha256} device={a.target_device} "
        f"max_ctx={a.max_ctx} chunk={a.chunk} fused_decode={int(a.fused_decode)} prefill={a.prefill}"
    )
    if settings.spec:
        log.line(
            f"[ds4-spec] speculation on: draft {settings.draft} sha256={settings.draft_sha256} "
            f"q={settings.q} reference_exact={int(settings.reference_exact)} "
            f"fused_verify={int(settings.fused_verify)} adaptive_width={int(settings.adaptive_width)}"
        )
    if settings.trace:
        log.line("ds4: exact verify trace enabled")
    if settings.faults.faults:
        log.line(f"ds4ci-sim: fault switches on: {','.join(settings.faults.names())}")


def _fork_helper(log: Log) -> None:
    """Fault fork-helper: a child in our process group that holds the listening socket,
    ignores TERM and outlives us, so only a KILL of the whole group ends it."""
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            while True:
                signal.pause()
        finally:
            os._exit(0)
    log.line(f"ds4ci-sim: forked helper pid {pid} holding the listening socket (fault fork-helper)")


def _seconds_since_exec() -> float:
    """How long this process has existed (interpreter start included), from /proc; 0 if unknown."""
    try:
        fields = Path("/proc/self/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat: start time in clock ticks after boot
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _remaining(delay_s: float) -> float:
    """DS4SIM_STARTUP_DELAY counts from exec, like a real server's load time, so the benchmark's
    floor (starts x delay) includes the simulator's own interpreter start-up."""
    return max(0.0, delay_s - _seconds_since_exec()) if delay_s > 0 else 0.0


def _serve(settings: SimSettings, log: Log) -> int:
    a = settings.args
    if settings.fault("ignore-sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.line("ds4ci-sim: ignoring SIGTERM (fault ignore-sigterm)")
    if settings.listen_late:
        time.sleep(_remaining(settings.startup_delay_s))  # "loading" before the port is even bound
    try:
        server = SimServer(settings, Engine(settings, log), log)
    except OSError as exc:
        log.line(f"error: couldn't bind HTTP server socket, hostname: {a.host}, port: {a.port}: {exc.strerror or exc}")
        return 1
    thread: threading.Thread | None = None
    try:
        if settings.fault("fork-helper"):
            _fork_helper(log)  # before any thread exists: forking a threaded process is unsafe
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        log.line(f"main: HTTP server listening on http://{a.host}:{a.port} (loading model)")
        if not settings.listen_late:
            time.sleep(_remaining(settings.startup_delay_s))
        if settings.fault("exit-before-ready"):
            log.line("load_model: fatal: simulated failure while loading (fault exit-before-ready)")
            return 1
        server.ready.set()
        log.line(f"main: model loaded; server is listening on http://{a.host}:{a.port} - ready")
        while True:
            signal.pause()
    finally:
        if thread is not None:
            server.shutdown()  # waits only for the accept loop; request threads are daemons
        server.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    log = Log()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        try:
            settings = load_settings(args, os.environ)
        except Ds4ciError as exc:
            log.line(f"ds4ci-sim: error: {exc}")
            return exc.exit_code
        _describe(settings, log)
        return _serve(settings, log)
    except _Stop as stop:
        log.line(f"ds4ci-sim: received signal {stop.args[0]}, shutting down")
        return 0
