"""``ds4ci-sim``: start-up, readiness and shutdown of the simulated server.

Order of start-up, like the real binary: parse flags (exit 2, also for ``--ds4-fused-decode``
off HIP), read the environment, load the model files (exit 1 if the target cannot be read; a
draft that does not load only turns speculation off), spend the simulated load time, then bind
exactly host:port (exit 1 if that fails) and answer. It does not listen before the model is
loaded, so readiness is the first ``200 {"status":"ok"}`` on /health.

Until it listens, SIGTERM and SIGINT have their default effect (the process dies of them), as
the real server installs its handlers only then. Afterwards either one stops it: no new
connection is accepted, the client threads get up to 5 s, every queued and in-flight completion
is finished and answered, then the weights are "freed" (``DS4SIM_TEARDOWN_DELAY``) and it exits 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ds4ci import __version__
from ds4ci.errors import Ds4ciError
from ds4ci.simulator.engine import Engine
from ds4ci.simulator.exactwriter import ExactTraceWriter
from ds4ci.simulator.faults import Arm
from ds4ci.simulator.helpers import fork_helper, setsid_helper
from ds4ci.simulator.http import CLIENT_GRACE_S, SimServer
from ds4ci.simulator.load import load_settings
from ds4ci.simulator.logs import Log
from ds4ci.simulator.settings import (
    FUSED_DECODE_REFUSAL,
    Args,
    Knobs,
    SimSettings,
    fused_decode_refused,
    parse_args,
    read_knobs,
    read_policy,
)

_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


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


def _valid_ipv4(host: str) -> bool:
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts)


def _bind(settings: SimSettings, engine: Engine, log: Log) -> SimServer | None:
    a = settings.args
    if not _valid_ipv4(a.host):
        log.line(f"[server] invalid host address: {a.host}")
        return None
    try:
        return SimServer(settings, engine, log)
    except OSError as exc:
        log.line(f"[server] bind({a.host}:{a.port}) failed: {exc.strerror or exc}")
        return None


def _stop_signals(settings: SimSettings) -> set[signal.Signals]:
    """Block the stop signals (every thread started later inherits the mask) to take them with sigwait."""
    wanted = {signal.SIGINT} if settings.fault("ignore-sigterm") else set(_STOP_SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    return wanted


def _start(server: SimServer) -> threading.Thread:
    server.worker.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return thread


def _helpers(settings: SimSettings, log: Log) -> None:
    if settings.fault("fork-helper"):
        fork_helper(log)
    if settings.fault("setsid-helper"):
        setsid_helper(settings.knobs.helper_pid_file, log)


def _shutdown(server: SimServer, settings: SimSettings, signum: int, log: Log) -> int:
    log.line(f"[server] signal {signum}: stopping; no new connections, finishing what is in flight")
    server.shutdown()  # the accept loop ends within its poll interval; the socket stays open
    left = server.wait_for_clients(CLIENT_GRACE_S)
    if left:
        log.line(f"[server] shutdown: {left} client thread(s) still active after grace period, exiting anyway")
    server.worker.drain()  # every queued and in-flight completion is finished and answered
    delay = settings.teardown_delay_s
    log.line(f"ds4ci-sim: freeing model weights ({delay:.1f} s), then exit 0")
    time.sleep(delay)
    server.server_close()
    return 0


def _listen(settings: SimSettings, engine: Engine, log: Log, note: str = "") -> SimServer | None:
    """Bind, leave the helpers behind (before any thread), start serving; None if binding failed."""
    server = _bind(settings, engine, log)
    if server is None:
        return None
    _helpers(settings, log)
    _start(server)
    log.line(f"[server] listening on http://{settings.args.host}:{settings.args.port}{note}")
    return server


def _serve(args: Args, knobs: Knobs, log: Log) -> int:
    policy = read_policy(os.environ, knobs.faults)
    if knobs.faults.active("ignore-sigterm", Arm(spec=policy.spec, q=policy.q)):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log.line("ds4ci-sim: ignoring SIGTERM (fault ignore-sigterm)")
    settings = load_settings(args, os.environ, knobs, log)
    if settings.faults.faults:
        log.line(f"ds4ci-sim: fault switches on: {','.join(settings.faults.names())}")
    engine = Engine(settings, log, ExactTraceWriter.from_env(os.environ, settings, log))
    server: SimServer | None = None
    waited: set[signal.Signals] = set()
    if settings.fault("loading-503"):
        # A server that listens while loading and answers 503 meanwhile (not the real one).
        waited = _stop_signals(settings)
        server = _listen(settings, engine, log, " (loading: 503 until ready)")
        if server is None:
            return 1
        # Already listening, so a stop signal during the load is handled like any other.
        early = signal.sigtimedwait(waited, _remaining(knobs.startup_delay_s))
        if early is not None:
            return _shutdown(server, settings, early.si_signo, log)
    else:
        time.sleep(_remaining(knobs.startup_delay_s))
    if settings.fault("exit-before-ready"):
        log.line("[deepseek4] fatal: simulated failure while loading (fault exit-before-ready)")
        return 1
    if server is None:
        waited = _stop_signals(settings)
        server = _listen(settings, engine, log)
        if server is None:
            return 1
    server.ready.set()
    log.line(f"[server] ready: http://{args.host}:{args.port} (ds4ci-sim {__version__})", stdout=True)
    signum = signal.sigwait(waited)
    return _shutdown(server, settings, signum, log)


def main(argv: Sequence[str] | None = None) -> int:
    # The default dispositions until the server listens, as in the real binary.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    log = Log()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if fused_decode_refused(args):
        log.line(FUSED_DECODE_REFUSAL)
        return 2
    log.line(f"ds4ci-sim {__version__} (protocol double of dflash_server), pid {os.getpid()}")
    try:
        knobs = read_knobs(os.environ)
        return _serve(args, knobs, log)
    except Ds4ciError as exc:
        log.line(f"ds4ci-sim: error: {exc}")
        return exc.exit_code
