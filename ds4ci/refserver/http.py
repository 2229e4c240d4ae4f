"""HTTP: /health, /props and /v1/chat/completions, served on IPv4 once the models have loaded.

Connections are handled on threads (so /health answers while a completion runs), but completions
themselves go through one worker thread in arrival order: requests are serialized, FIFO. Every
response closes its connection.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ds4ci import __version__
from ds4ci.refserver.api import BadRequest, ChatRequest, Completion, completion_body, error_body, parse_request, stream_events
from ds4ci.refserver.engine import Engine, RequestRefused

MAX_BODY = 1 << 20
COMPLETIONS_PATHS = ("/v1/chat/completions", "/chat/completions")
_Job = tuple[ChatRequest, "Future[Completion]"]


class Worker:
    """The one slot: completions run here, one at a time, in the order they arrived."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ds4ref-worker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            request, future = job
            try:
                future.set_result(self.engine.complete(request))
            except Exception as exc:  # any failure is answered as a 500 with its message
                self.engine.log.line(f"slot 0: error: {exc.__class__.__name__}: {exc}")
                future.set_exception(exc)

    def submit(self, request: ChatRequest) -> Completion:
        future: Future[Completion] = Future()
        self._jobs.put((request, future))
        return future.result()

    def stop(self) -> None:
        """Finish every job already queued, then end the thread."""
        self._jobs.put(None)
        self._thread.join()


class RefHTTPServer(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() waits for in-flight requests: SIGTERM finishes them
    allow_reuse_address = True

    def __init__(self, host: str, port: int, engine: Engine) -> None:
        self.engine = engine
        self.worker = Worker(engine)
        super().__init__((host, port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: RefHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = f"ds4ci-refserver/{__version__}"
    disable_nagle_algorithm = True
    timeout = 5.0  # an idle client cannot hold shutdown for longer than this

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode("utf-8"), "application/json")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._json(200, {"status": "ok"})
        elif path == "/props":
            self._json(200, self.server.engine.props())
        else:
            self._json(404, error_body(404, f"no endpoint {path}", "not_found_error"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            length = int(self.headers.get("Content-Length", "-1"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._json(400, error_body(400, f"need a Content-Length of 0..{MAX_BODY}", "invalid_request_error"))
            return
        body = self.rfile.read(length)
        if path not in COMPLETIONS_PATHS:
            self._json(404, error_body(404, f"no endpoint {path}", "not_found_error"))
            return
        try:
            request = parse_request(body)
        except BadRequest as exc:
            self._json(400, error_body(400, str(exc), "invalid_request_error"))
            return
        try:
            completion = self.server.worker.submit(request)
        except RequestRefused as exc:
            self._json(400, error_body(400, str(exc), "invalid_request_error"))
            return
        except Exception as exc:
            self._json(500, error_body(500, f"{exc.__class__.__name__}: {exc}", "server_error"))
            return
        name = self.server.engine.args.target.name
        if request.stream:
            events = stream_events(request, completion, name)
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self._send(200, data.encode("utf-8"), "text/event-stream")
        else:
            self._json(200, completion_body(request, completion, name))

    def log_message(self, format: str, *args: Any) -> None:
        if getattr(self, "path", "").split("?", 1)[0] == "/health":
            return  # readiness polling would drown the log
        self.server.engine.log.line(f"srv  log_server_r: {self.address_string()} {format % args}")

    def handle(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            super().handle()
