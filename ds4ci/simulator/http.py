"""The HTTP face of the simulator: /health, /props and /v1/chat/completions on the stdlib server.

Connections are served on threads so /health answers while a completion runs (as the real
server does), but completions themselves queue on the engine's lock: one slot.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ds4ci import __version__
from ds4ci.simulator.engine import BadRequest, Engine, error_body, parse_request
from ds4ci.simulator.logs import Log
from ds4ci.simulator.settings import SimSettings

MAX_BODY = 1 << 20
COMPLETIONS_PATHS = ("/v1/chat/completions", "/chat/completions")


def props(settings: SimSettings) -> dict[str, Any]:
    a = settings.args
    return {
        "server": {"name": "ds4ci-sim", "version": __version__},
        "model": {
            "target": str(a.target),
            "target_sha256": settings.target_sha256,
            "draft": None if settings.draft is None else str(settings.draft),
            "draft_sha256": settings.draft_sha256,
        },
        "settings": {
            "host": a.host,
            "port": a.port,
            "target_device": a.target_device,
            "max_ctx": a.max_ctx,
            "chunk": a.chunk,
            "fused_decode": a.fused_decode,
            "prefill": a.prefill,
            "spec": settings.spec,
            "q": settings.q if settings.spec else None,
            "reference_exact": settings.reference_exact,
            "fused_verify": settings.fused_verify,
            "exact_verify_trace": settings.trace,
            "adaptive_width": settings.adaptive_width,
            "mmvq_max_ncols": settings.mmvq_max_ncols,
            "env_prefix": settings.env_prefix,
        },
        "simulator": {
            "faults": list(settings.faults.names()),
            "startup_delay_s": settings.startup_delay_s,
            "token_delay_s": settings.token_delay_s,
        },
    }


class SimServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung request (fault hang-request) must not block exit
    allow_reuse_address = True

    def __init__(self, settings: SimSettings, engine: Engine, log: Log) -> None:
        host = settings.args.host
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.settings = settings
        self.engine = engine
        self.log = log
        self.ready = threading.Event()
        super().__init__((host, settings.args.port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: SimServer
    protocol_version = "HTTP/1.1"
    # Response headers go out in several small writes: without TCP_NODELAY, Nagle plus the
    # client's delayed ACK add ~40 ms to every request, which the benchmarks would charge to ds4ci.
    disable_nagle_algorithm = True
    server_version = f"ds4ci-sim/{__version__}"

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _loading(self) -> bool:
        if self.server.ready.is_set():
            return False
        self._send_json(503, error_body(503, "Loading model", "unavailable_error"))
        return True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if not self._loading():
                self._send_json(200, {"status": "ok"})
        elif path == "/props":
            if not self._loading():
                self._send_json(200, props(self.server.settings))
        else:
            self._send_json(404, error_body(404, f"no endpoint {path}", "not_found_error"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length_text = self.headers.get("Content-Length")
        try:
            length = int(length_text) if length_text is not None else -1
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True  # the body cannot be skipped safely
            self._send_json(400, error_body(400, f"need a Content-Length of 0..{MAX_BODY}", "invalid_request_error"))
            return
        body = self.rfile.read(length)
        if path not in COMPLETIONS_PATHS:
            self._send_json(404, error_body(404, f"no endpoint {path}", "not_found_error"))
            return
        if self._loading():
            return
        try:
            request = parse_request(body, self.server.settings.args.max_ctx)
        except BadRequest as exc:
            self._send_json(exc.status, error_body(exc.status, str(exc), "invalid_request_error"))
            return
        answer = self.server.engine.complete(request)
        self._send_json(answer.status, answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self, "path", "").split("?", 1)[0] == "/health":
            return  # readiness polling would drown the log
        self.server.log.line(f"srv  log_server_r: {self.address_string()} {format % args}")

    def handle(self) -> None:
        # The client may go away (e.g. a gate that timed out); there is nothing left to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()
