"""``ds4ci-refserver``: start-up, readiness and shutdown.

Order, like the DS4 server: parse the command line (exit 2, before PyTorch is even imported),
read the environment (exit 1 on values it refuses), load the models (exit 1 if a target cannot be
used; a draft that cannot is reported and speculation is off), and only then bind host:port
(exit 1 if taken): there is no "loading" phase on the wire, the first answer of /health is 200.
SIGTERM or SIGINT stop accepting, let the request in flight (and any already queued) finish, and
exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from types import FrameType

from ds4ci.refserver.args import parse_args
from ds4ci.refserver.env import EnvError, read_env

EXIT_STARTUP = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        env = read_env(os.environ)
    except EnvError as exc:
        print(f"[server] ds4ci-refserver: {exc}", file=sys.stderr, flush=True)
        return EXIT_STARTUP

    # PyTorch warns at import when NumPy is absent; the server does not use NumPy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

    from ds4ci.refserver.engine import Engine, Log, StartupError, load
    from ds4ci.refserver.http import RefHTTPServer

    log = Log()
    if env.threads is not None:
        torch.set_num_threads(env.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 on every device
    torch.backends.cudnn.allow_tf32 = False
    try:
        loaded = load(args, env)
    except StartupError as exc:
        log.line(f"[server] ds4ci-refserver: {exc}")
        return EXIT_STARTUP
    engine = Engine(args, env, loaded, log)
    engine.describe()
    if stop.is_set():
        log.line("main: stopped by a signal while loading")
        return 0
    try:
        server = RefHTTPServer(args.host, args.port, engine)
    except OSError as exc:
        log.line(f"error: couldn't bind HTTP server socket, hostname: {args.host}, port: {args.port}: {exc.strerror or exc}")
        return EXIT_STARTUP
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="ds4ref-http")
    thread.start()
    log.line(f"main: model loaded; server is listening on http://{args.host}:{args.port}")
    while not stop.wait(0.2):
        pass
    name = signal.Signals(received[0]).name if received else "signal"
    log.line(f"main: received {name}: no new connections; finishing the request in flight, then exiting")
    server.shutdown()
    thread.join()
    server.server_close()  # joins the request threads: in-flight requests are answered
    server.worker.stop()
    log.line("main: stopped cleanly")
    return 0
