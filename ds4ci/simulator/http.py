"""The HTTP face of the simulator: /health, /props and /v1/chat/completions on the stdlib server.

Like the real server: IPv4 only; every connection is served on its own thread, so /health
answers while a completion runs; completions go to one worker thread through a FIFO queue, so
they run one at a time in arrival order; the worker sends the response, then writes its closing
log line; every response closes its connection (``Connection: close``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ds4ci import __version__
from ds4ci.simulator.engine import Answer, Engine, error_body
from ds4ci.simulator.logs import Log
from ds4ci.simulator.request import BadRequest, ChatRequest, parse_request, prompt_tokens
from ds4ci.simulator.settings import SimSettings

MAX_BODY = 1 << 20
COMPLETIONS_PATHS = ("/v1/chat/completions", "/chat/completions")
CLIENT_GRACE_S = 5.0  # how long a stopping server waits for client threads


def props(settings: SimSettings) -> dict[str, Any]:
    a, p, k = settings.args, settings.policy, settings.knobs
    return {
        "server": {"name": "luce-dflash", "version": f"{__version__}+ds4ci-sim"},
        "model": {
            "target": str(a.target),
            "target_sha256": settings.target_sha256,
            "draft": p.draft,
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
            "spec_requested": p.spec,
            "spec": settings.spec,
            "q": p.q if settings.spec else None,
            "reference_exact": p.reference_exact,
            "full_snap": p.full_snap,
            "fused_verify": settings.fused_verify,
            "exact_verify_trace": settings.trace,
            "adaptive_width": p.adaptive_width,
            "mmvq_max_ncols": p.mmvq_max_ncols,
            "env_prefixes": list(p.prefixes),
        },
        "model_card": {
            "source": settings.card.source,
            "temperature": settings.card.temperature,
            "top_p": settings.card.top_p,
            "top_k": settings.card.top_k,
            "presence_penalty": settings.card.presence_penalty,
            "repetition_penalty": settings.card.repetition_penalty,
        },
        "simulator": {
            "faults": list(settings.faults.names()),
            "startup_delay_s": k.startup_delay_s,
            "token_delay_s": k.token_delay_s,
            "teardown_delay_s": settings.teardown_delay_s,
            "pid": os.getpid(),
        },
    }


@dataclass
class Job:
    request: ChatRequest
    response_id: str
    handler: _Handler
    done: threading.Event = field(default_factory=threading.Event)


class Worker:
    """The one thread that runs completions, in the order they arrived."""

    def __init__(self, engine: Engine, log: Log) -> None:
        self._engine = engine
        self._log = log
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def drain(self) -> None:
        """Finish every queued job, then stop (waits for ever if one never finishes, as the real one)."""
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                answer = self._engine.complete(job.request, job.response_id)
                job.handler.send_answer(answer, job.request.stream)
                for pending in answer.after:
                    self._log.line(pending.text, stdout=pending.stdout)
                if answer.done_line:
                    self._log.line(answer.done_line)
            finally:
                job.done.set()


class SimServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung request (fault hang-request) must not block exit
    allow_reuse_address = True  # SO_REUSEADDR, like the real server
    address_family = socket.AF_INET  # the real server binds IPv4 only
    request_queue_size = 128

    def __init__(self, settings: SimSettings, engine: Engine, log: Log) -> None:
        self.settings = settings
        self.log = log
        self.worker = Worker(engine, log)
        self.ready = threading.Event()
        self._ids = itertools.count()
        self._clients = 0
        self._clients_cv = threading.Condition()
        super().__init__((settings.args.host, settings.args.port), _Handler)

    def next_id(self) -> str:
        return f"chatcmpl-sim{os.getpid()}x{next(self._ids)}"

    def client_started(self) -> None:
        with self._clients_cv:
            self._clients += 1

    def client_finished(self) -> None:
        with self._clients_cv:
            self._clients -= 1
            self._clients_cv.notify_all()

    def wait_for_clients(self, timeout: float) -> int:
        """Wait up to ``timeout`` for every client thread to finish; returns how many still run."""
        with self._clients_cv:
            self._clients_cv.wait_for(lambda: self._clients == 0, timeout)
            return self._clients


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode("utf-8") + b"\n\n"


def _stream_events(body: dict[str, Any]) -> bytes:
    """A finished answer as OpenAI chat.completion.chunk events (role, one word each, finish, usage)."""
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    choice = body["choices"][0]
    words = choice["message"]["content"].split(" ") if choice["message"]["content"] else []
    parts = [_sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    parts += [
        _sse({**head, "choices": [{"index": 0, "delta": {"content": (" " if i else "") + w}}]}) for i, w in enumerate(words)
    ]
    parts.append(_sse({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}))
    parts.append(_sse({**head, "choices": [], "usage": body["usage"]}))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


class _Handler(BaseHTTPRequestHandler):
    server: SimServer
    protocol_version = "HTTP/1.1"
    # Response headers go out in several small writes: without TCP_NODELAY, Nagle plus the
    # client's delayed ACK add ~40 ms to every request (the real server sets it too).
    disable_nagle_algorithm = True
    server_version = f"ds4ci-sim/{__version__}"

    def _send(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode("utf-8") + b"\n")

    def send_answer(self, answer: Answer, stream: bool) -> None:
        """Called by the worker thread while this handler's thread waits for it."""
        with contextlib.suppress(OSError):  # the client may have gone away; nothing left to answer
            if answer.status != 200 or not stream:
                self._send_json(answer.status, answer.body)
                return
            # The real server's event-stream headers say keep-alive; it closes the socket all the same.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "keep-alive")
            self.end_headers()
            self.wfile.write(_stream_events(answer.body))
            self.close_connection = True

    def _loading(self) -> bool:
        if self.server.ready.is_set():
            return False
        self._send_json(503, error_body("Loading model"))
        return True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/"):
            if not self._loading():
                self._send_json(200, {"status": "ok"})
        elif path == "/props":
            if not self._loading():
                self._send_json(200, props(self.server.settings))
        else:
            self._send_json(404, error_body("unknown endpoint"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length_text = self.headers.get("Content-Length")
        try:
            length = int(length_text) if length_text is not None else -1
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._send_json(400, error_body("bad HTTP request"))
            return
        body = self.rfile.read(length)
        self.server.log.line(f"[server] request path={path} body_bytes={len(body)}")
        if path not in COMPLETIONS_PATHS:
            self._send_json(404, error_body("unknown endpoint"))
            return
        if self._loading():
            return
        settings = self.server.settings
        try:
            request = parse_request(body, settings.args.max_ctx, settings.card)
        except BadRequest as exc:
            self._send_json(exc.status, error_body(str(exc)))
            return
        if request.requested_max_tokens != request.max_tokens:
            self.server.log.line(
                f"[server] max_tokens={request.requested_max_tokens} clamped to default_max_tokens={request.max_tokens}"
            )
        job = Job(request, self.server.next_id(), self)
        self.server.log.line(
            f"[server] chat {job.response_id} format=openai_chat stream={str(request.stream).lower()} "
            f"msgs={request.messages} tools=0 prompt_tokens={prompt_tokens(request.prompt_text)} "
            f"max_tokens={request.max_tokens} max_ctx={settings.args.max_ctx} thinking=false "
            f"started_in_thinking=false stops={len(request.stop)} model={request.model or settings.args.target.name}"
        )
        self.server.worker.submit(job)
        job.done.wait()

    def log_message(self, format: str, *args: Any) -> None:
        return  # the real server logs requests itself (above), not per connection

    def handle(self) -> None:
        self.server.client_started()
        try:
            # The client may go away (e.g. a gate that timed out); there is nothing left to answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                super().handle()
        finally:
            self.server.client_finished()

