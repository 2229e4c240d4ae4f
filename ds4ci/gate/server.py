"""One inference-server process: free loopback port, own process group, readiness, requests, stop.

Guarantees the gate relies on:
- the server runs under the process supervisor (``ds4ci.supervisor``): in a PID namespace where
  the kernel allows, else under a subreaper with a sweep by a per-run tracking variable; stopping
  sends SIGTERM, then SIGKILL after ``stop_timeout``, and everything it started (double-forked
  ``setsid`` daemons included) is killed and reaped, also when ds4ci itself is SIGKILLed;
- under the sandbox it has a network namespace and a /tmp quota (log_cap) of its own, reached only by
  ds4ci; elsewhere readiness is only believed when every listener on the port is the server or its own;
- stdout and stderr each go to one file, written once and never copied; a request records only
  the byte range each stream grew by while it was in flight (for diagnostics: attribution of
  log lines to requests happens by order once the server has stopped, see ``attribution``);
- each log file is capped by the kernel (RLIMIT_FSIZE in the child): a server that floods its
  log is stopped by the limit instead of filling the runner's disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci import supervisor
from ds4ci.errors import NoVerdictError
from ds4ci.gate import interrupt, tracefile
from ds4ci.gate.loopback import HOST, Answer, HttpAnswerError, exchange, quote_body
from ds4ci.judging import exacttrace
from ds4ci.judging.logtail import excerpt, exec_failure, exit_description, explain
from ds4ci.log import Logger, as_logger, file_growth
from ds4ci.options import policy
from ds4ci.supervisor import Child

_HEALTH_POLL_S = 0.01
PROPS_ERROR_BODY = "props.error-body"  # a /props answer that is not 200 with a JSON object, as received
_STOP_HEARTBEAT_S = 5.0  # a stopping server is heard from at least this often (freeing a big model takes a while)
# What a loopback exchange can fail with: refused/reset/timed out (OSError), a broken answer (http11.BrokenAnswer).
_HTTP_ERRORS = (OSError, http.client.HTTPException)


_NO_EXTRA_VIEW = supervisor.View()


@dataclass(frozen=True)
class ServerSettings:
    binary: Path
    target: Path
    target_device: str
    max_ctx: int
    chunk: int
    args: tuple[str, ...]  # device-dependent defaults (or their replacement) plus extra server_args
    startup_timeout_s: float
    request_timeout_s: float
    stop_timeout_s: float
    log_cap_bytes: int
    view: supervisor.View = _NO_EXTRA_VIEW  # what the server may see beyond the sandbox's default view
    launcher: tuple[str, ...] = ()  # what runs ``binary``: () starts it itself; ds4ci's Python for the simulator


@dataclass(frozen=True)
class Exchange:
    """One completion request: what was sent, what came back, and how far each log grew meanwhile."""

    request: dict[str, Any]
    response: dict[str, Any]
    elapsed_s: float
    stderr_range: tuple[int, int]
    stdout_range: tuple[int, int]


_claimed: set[int] = set()  # ports handed to a server of this process: arms side by side never share one
_claimed_lock = threading.Lock()


def pick_free_port() -> int:
    """A port free on the loopback interface right now (checked again just before start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def claim_free_port(tries: int = 20) -> int:
    """A free loopback port no other server of this process was given; NoVerdictError after ``tries``."""
    for _ in range(tries):
        port = pick_free_port()
        with _claimed_lock:
            if port not in _claimed and port_is_free(port):
                _claimed.add(port)
                return port
    raise NoVerdictError(f"could not find a free loopback port after {tries} tries")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def server_command(settings: ServerSettings, port: int) -> list[str]:
    """The argv: what ds4ci owns (model, address, context, device), then the configured arguments."""
    return [
        *settings.launcher, str(settings.binary), str(settings.target),
        "--host", HOST, "--port", str(port),
        "--max-ctx", str(settings.max_ctx), "--chunk", str(settings.chunk),
        "--target-device", settings.target_device,
        *settings.args,
    ]


class Server:
    """A started server. Use ``launch()``; always leave through ``stop()`` (the context manager does)."""

    def __init__(
        self,
        settings: ServerSettings,
        env: Mapping[str, str],
        log_dir: Path,
        progress: Callable[[str], None] | Logger,
        label: str,
    ) -> None:
        self.settings = settings
        self.env = dict(env)
        self.log_dir = log_dir
        self.progress = as_logger(progress)
        self.label = label
        self.port = 0
        self.child: Child | None = None
        self.stderr_path = log_dir / "stderr.log"
        self.stdout_path = log_dir / "stdout.log"
        self.ready_s: float | None = None
        self.props: dict[str, Any] | None = None
        self.needed_kill = False
        self.in_flight = False
        self.exit_code: int | None = None
        self.stop_s: float | None = None
        self.swept: list[str] = []  # what was still alive after the server stopped, and was killed
        self.exact_trace: str | None = None  # what became of its exact-differential trace file (tracefile.collect)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=False)
        self.port = port = claim_free_port()
        command = server_command(self.settings, port)
        (self.log_dir / "command.json").write_text(
            json.dumps({"argv": command, "port": port}, indent=2) + "\n", encoding="utf-8"
        )
        started = time.monotonic()
        try:
            self.child = supervisor.default().spawn(
                command, env=self.env, stdout=self.stdout_path, stderr=self.stderr_path,
                start_timeout=self.settings.startup_timeout_s, file_size_limit=self.settings.log_cap_bytes,
                # no host service in its reach; its /tmp a tmpfs no bigger than one log may grow
                view=dataclasses.replace(self.settings.view, own_network=True, scratch_bytes=self.settings.log_cap_bytes),
            )
        except (OSError, supervisor.SupervisorError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise NoVerdictError(f"cannot start server {command[0]}: {detail}") from exc
        if policy.EXACT_TRACE_POLICY.items() <= self.env.items() and hasattr(self.child, "before_cleanup"):
            self.child.before_cleanup = self._collect_exact_trace
        self.progress(
            f"{self.label}: server pid {self.child.pid} starting on {HOST}:{port} (containment: {self.child.containment}"
            f"{', its own network namespace' if self.child.new_socket is not None else ''})"
        )
        with self._heartbeat("loading"):
            self._wait_ready(started)
        self.ready_s = time.monotonic() - started
        self.progress(f"{self.label}: ready in {self.ready_s:.2f} s")
        self.props = self._get_props()
        (self.log_dir / "props.json").write_text(json.dumps(self.props, indent=2, allow_nan=False) + "\n", encoding="utf-8")

    def scratch(self) -> dict[str, Any]:
        """Its /tmp's ``quota_bytes`` (None: no tmpfs of that size) and ``full``: was it full when the server ended."""
        quota = self.child.scratch_quota if self.child is not None else None
        return {"quota_bytes": quota, "full": self.child.scratch_full if self.child is not None and quota else None}

    def _collect_exact_trace(self, scratch: Path) -> None:
        """Seal the trace the server left in its scratch folder (its ``/tmp``) beside its logs."""
        try:
            self.exact_trace = tracefile.collect(
                scratch / policy.EXACT_TRACE_NAME, self.log_dir / exacttrace.EVIDENCE_NAME, exacttrace.MAX_TRACE_BYTES)
        except OSError as exc:  # an unreadable file (or a full disk) is no trace, never a traceback
            self.exact_trace = f"{exacttrace.REFUSED}: it could not be copied ({exc.strerror or exc})"

    def _wait_ready(self, started: float) -> None:
        assert self.child is not None
        deadline = started + self.settings.startup_timeout_s
        while True:
            code = self.child.poll()
            if code is not None:
                failed = exec_failure([self.stderr_path, self.stdout_path])
                first = (f"{self.label}: server exited with {exit_description(code)} before it was ready" if failed is None
                         else f"{self.label}: the server program could not be started in the sandbox, it never ran "
                         f"({failed}): the sandbox shows the program's folder, the models, the checkout and "
                         "[sandbox] ro_paths only, so an interpreter a script's first line names is not there; for "
                         "ds4ci's bundled simulator set gate.server = \"simulator\"")
                raise NoVerdictError(self.explain(first))
            if time.monotonic() > deadline:
                raise NoVerdictError(self.explain(
                    f"{self.label}: server did not answer /health within {self.settings.startup_timeout_s:g} s "
                    "(--startup-timeout)"
                ))
            try:
                answer = self._exchange("GET", "/health", 2.0)
            except _HTTP_ERRORS:
                time.sleep(_HEALTH_POLL_S)
                continue
            if answer.status_code == 200 and answer.body == {"status": "ok"}:
                self._check_listener_is_ours()
                return
            time.sleep(_HEALTH_POLL_S)

    def _exchange(self, method: str, path: str, timeout_s: float, body: dict[str, Any] | None = None) -> Answer:
        assert self.child is not None  # reached inside its own network namespace when it has one
        try:
            return exchange(self.port, method, path, timeout_s, body, self.child.new_socket)
        except supervisor.SupervisorError as exc:  # the namespace could not be entered
            if self._exit_code_soon() is not None:
                # Because the server has ended (its exit may be reported after a poll said it ran): nothing
                # listens, and each caller says how the server ended, as for any refused connection.
                raise ConnectionRefusedError(f"the server ended before its network namespace was entered ({exc})") from exc
            raise NoVerdictError(f"{self.label}: {exc}") from exc  # a live server out of reach: never a retry

    def _check_listener_is_ours(self) -> None:
        assert self.child is not None
        if self.child.new_socket is not None:
            return  # its own network namespace holds only the server's processes: no stranger can listen there
        listeners = supervisor.tcp_listeners(self.port)
        strangers = sorted(pid for pid in listeners.pids if not self.child.owns(pid))
        if strangers or listeners.unidentified or not listeners.pids:
            found = ", ".join(str(p) for p in strangers) or (
                f"{listeners.unidentified} unidentified socket(s)" if listeners.unidentified else "none visible"
            )
            raise NoVerdictError(
                f"{self.label}: port {self.port} answered /health, but the listening process is not our server "
                f"(expected pid {self.child.pid} or its descendants, found {found}); refusing to talk to a stranger"
            )

    def _get_props(self) -> dict[str, Any]:
        try:
            answer = self._exchange("GET", "/props", self.settings.request_timeout_s)
        except _HTTP_ERRORS as exc:
            code = self._exit_code_soon()
            ended = f" (server exited with {exit_description(code)})" if code is not None else ""
            raise NoVerdictError(self.explain(
                f"{self.label}: GET /props failed: {exc.__class__.__name__}: {exc}{ended}")) from exc
        body = answer.body
        if answer.status_code != 200 or not isinstance(body, dict):
            kept = self.log_dir / PROPS_ERROR_BODY
            kept.write_bytes(answer.raw)  # the answer as received is evidence: sealed with the server's files
            why = f" ({answer.malformed})" if answer.malformed and answer.status_code == 200 else ""
            raise NoVerdictError(
                f"{self.label}: GET /props answered HTTP {answer.status_code}{why}, expected 200 with JSON; "
                f"{quote_body(answer.raw)} (kept as {kept.name})"
            )
        return body

    def stop(self) -> None:
        """SIGTERM, SIGKILL after stop_timeout, then kill and reap everything the server left."""
        child = self.child
        if child is None:
            return
        t0 = time.monotonic()
        running = child.poll() is None
        if running:
            gpu = not self.settings.target_device.startswith("cpu")
            self.progress(f"{self.label}: stopping (SIGTERM{'; the server may take a while to free the GPU' if gpu else ''})")
        try:
            with self._heartbeat("stopping", every_s=min(self.progress.heartbeat_s, _STOP_HEARTBEAT_S)), \
                    interrupt.stopping(child):
                self.needed_kill = child.terminate(self.settings.stop_timeout_s)
            if self.needed_kill:
                self.progress(f"{self.label}: still running {self.settings.stop_timeout_s:g} s after SIGTERM; SIGKILL")
            self.swept = [f"pid {k.pid}: {k.name}" for k in child.sweep()]
        except supervisor.Unkillable as exc:
            child.abandon()
            raise NoVerdictError(f"{self.label}: processes survived SIGKILL: {exc}") from exc
        self.exit_code = child.returncode
        self.stop_s = time.monotonic() - t0
        how = f"stopped in {self.stop_s:.2f} s" if running else "had already exited"
        self.progress(f"{self.label}: {how}, exit {exit_description(self.exit_code)}")

    def _heartbeat(self, what: str, every_s: float | None = None) -> contextlib.AbstractContextManager[None]:
        """``<label>: still <what>: 45 s, log +2.1 MiB`` every heartbeat interval (growth of stderr + stdout)."""
        growth = file_growth([self.stderr_path, self.stdout_path])
        return self.progress.heartbeat(what, interval_s=every_s, detail=growth, prefix=f"{self.label}: ")

    # -- requests --------------------------------------------------------------------------
    def _sizes(self) -> tuple[int, int]:
        return self.stderr_path.stat().st_size, self.stdout_path.stat().st_size

    def complete(self, body: dict[str, Any], keep_error_body: Path | None = None) -> Exchange:
        """Send one completion request (the exact body given) and wait for its answer.

        An answer that is not 200 with JSON raises HttpAnswerError; its body (as received, bounded) is
        written to ``keep_error_body`` first, when given.
        """
        assert self.child is not None
        before = self._sizes()
        started = time.monotonic()
        self.in_flight = True
        try:
            with self._heartbeat("waiting for the answer"):
                answer = self._exchange("POST", "/v1/chat/completions", self.settings.request_timeout_s, body)
        except TimeoutError as exc:
            raise NoVerdictError(self.explain(
                f"{self.label}: no answer within {self.settings.request_timeout_s:g} s (--request-timeout)"
            )) from exc
        except _HTTP_ERRORS as exc:
            code = self._exit_code_soon()
            state = f"server exited with {exit_description(code)}" if code is not None else "server still running"
            raise NoVerdictError(self.explain(f"{self.label}: request failed ({exc.__class__.__name__}; {state})")) from exc
        elapsed = time.monotonic() - started
        response = answer.body
        if answer.status_code != 200 or not isinstance(response, dict):
            if keep_error_body is not None:
                keep_error_body.parent.mkdir(parents=True, exist_ok=True)
                keep_error_body.write_bytes(answer.raw)
            why = f" ({answer.malformed})" if answer.malformed and answer.status_code == 200 else ""
            quoted = self.log_tail()
            raise HttpAnswerError(
                f"{self.label}: /v1/chat/completions answered HTTP {answer.status_code}{why}, expected 200 with JSON; "
                f"{quote_body(answer.raw)}" + (f"\n{quoted}" if quoted else ""),
                answer.status_code, answer.raw,
            )
        self.in_flight = False
        after = self._sizes()
        return Exchange(body, response, elapsed, (before[0], after[0]), (before[1], after[1]))

    def _exit_code_soon(self, grace_s: float = 2.0) -> int | None:
        """The server's exit code if it is exiting (a dropped connection often precedes the exit)."""
        assert self.child is not None
        return self.child.wait(grace_s)

    def log_tail(self) -> str:
        """For messages: abort-looking lines first, then the last lines of stderr and stdout, bounded."""
        return excerpt([self.stderr_path, self.stdout_path])

    def explain(self, first: str) -> str:
        """A reason: ``first`` (with the abort line that says why, when the log has one), then the log excerpt."""
        return explain(first, [self.stderr_path, self.stdout_path])
