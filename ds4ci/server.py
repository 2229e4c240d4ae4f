"""One inference-server process: free loopback port, own process group, readiness, requests, stop.

Guarantees the gate relies on:
- the server runs in a new session (its own process group); stopping sends SIGTERM to the whole
  group, then SIGKILL after ``stop_timeout``, and verifies the group is gone, so helpers the server
  forked cannot outlive the gate. The direct child also gets SIGKILL if ds4ci itself dies (Linux
  parent-death signal), covering ``kill -9`` of ds4ci;
- readiness is only believed when the process listening on the port belongs to that group, so a
  stranger that grabbed the port can never answer for our server;
- stdout and stderr each go to one file, written once and never copied; a request records only
  the byte range each stream grew by while it was in flight (for diagnostics: attribution of
  log lines to requests happens by order once the server has stopped, see ``attribution``);
- each log file is capped by the kernel (RLIMIT_FSIZE in the child): a server that floods its
  log is stopped by the limit instead of filling the runner's disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ds4ci.errors import NoVerdictError
from ds4ci.fileio import signal_group

HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
_HEALTH_POLL_S = 0.01
_LOG_TAIL_BYTES = 4000


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


@dataclass(frozen=True)
class Exchange:
    """One completion request: what was sent, what came back, and how far each log grew meanwhile."""

    request: dict[str, Any]
    response: dict[str, Any]
    elapsed_s: float
    stderr_range: tuple[int, int]
    stdout_range: tuple[int, int]


def pick_free_port() -> int:
    """A port free on the loopback interface right now (checked again just before start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


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
        str(settings.binary), str(settings.target),
        "--host", HOST, "--port", str(port),
        "--max-ctx", str(settings.max_ctx), "--chunk", str(settings.chunk),
        "--target-device", settings.target_device,
        *settings.args,
    ]


def _child_setup(log_cap_bytes: int) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        with contextlib.suppress(Exception):
            resource.setrlimit(resource.RLIMIT_FSIZE, (log_cap_bytes, log_cap_bytes))

    return setup


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on the port (IPv4 and IPv6), from /proc/net."""
    inodes: set[str] = set()
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1].endswith(wanted) and fields[3] == "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    return inodes


def _pids_holding(inodes: set[str]) -> set[int]:
    targets = {f"socket:[{inode}]" for inode in inodes}
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if str(fd.readlink()) in targets:
                        pids.add(int(entry.name))
                        break
        except OSError:
            continue
    return pids


def listener_pgids(port: int) -> set[int]:
    """Process groups of every process listening on the loopback port (Linux /proc)."""
    pgids: set[int] = set()
    for pid in _pids_holding(_listening_inodes(port)):
        with contextlib.suppress(ProcessLookupError):
            pgids.add(os.getpgid(pid))
    return pgids


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Server:
    """A started server. Use ``launch()``; always leave through ``stop()`` (the context manager does)."""

    def __init__(
        self,
        settings: ServerSettings,
        env: Mapping[str, str],
        log_dir: Path,
        progress: Callable[[str], None],
        label: str,
    ) -> None:
        self.settings = settings
        self.env = dict(env)
        self.log_dir = log_dir
        self.progress = progress
        self.label = label
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = log_dir / "stderr.log"
        self.stdout_path = log_dir / "stdout.log"
        self.ready_s: float | None = None
        self.props: dict[str, Any] | None = None
        self._http = requests.Session()
        self._http.trust_env = False  # never route loopback traffic through a proxy from the environment
        self.needed_kill = False
        self.in_flight = False
        self.exit_code: int | None = None
        self.stop_s: float | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=False)
        for _ in range(20):
            port = pick_free_port()
            if port_is_free(port):
                break
        else:
            raise NoVerdictError("could not find a free loopback port after 20 tries")
        self.port = port
        command = server_command(self.settings, port)
        (self.log_dir / "command.json").write_text(
            json.dumps({"argv": command, "port": port}, indent=2) + "\n", encoding="utf-8"
        )
        started = time.monotonic()
        with self.stderr_path.open("wb") as err, self.stdout_path.open("wb") as out:
            try:
                self.proc = subprocess.Popen(
                    command,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=_child_setup(self.settings.log_cap_bytes),  # noqa: PLW1509 - single-threaded here
                    close_fds=True,
                )
            except OSError as exc:
                raise NoVerdictError(f"cannot start server {command[0]}: {exc.strerror or exc}") from exc
        self.progress(f"{self.label}: server pid {self.proc.pid} starting on {HOST}:{port}")
        self._wait_ready(started)
        self.ready_s = time.monotonic() - started
        self.progress(f"{self.label}: ready in {self.ready_s:.2f} s")
        self.props = self._get_props()
        (self.log_dir / "props.json").write_text(json.dumps(self.props, indent=2) + "\n", encoding="utf-8")

    def _wait_ready(self, started: float) -> None:
        assert self.proc is not None
        deadline = started + self.settings.startup_timeout_s
        url = f"http://{HOST}:{self.port}/health"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise NoVerdictError(
                    f"{self.label}: server exited with code {code} before it was ready; "
                    f"last log lines:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise NoVerdictError(
                    f"{self.label}: server did not answer /health within {self.settings.startup_timeout_s:g} s "
                    f"(--startup-timeout); last log lines:\n{self.log_tail()}"
                )
            try:
                answer = self._http.get(url, timeout=2.0)
            except requests.RequestException:
                time.sleep(_HEALTH_POLL_S)
                continue
            if answer.status_code == 200 and _json_or_none(answer) == {"status": "ok"}:
                self._check_listener_is_ours()
                return
            time.sleep(_HEALTH_POLL_S)

    def _check_listener_is_ours(self) -> None:
        assert self.proc is not None
        pgids = listener_pgids(self.port)
        if pgids != {self.proc.pid}:
            found = ", ".join(str(p) for p in sorted(pgids)) or "none visible"
            raise NoVerdictError(
                f"{self.label}: port {self.port} answered /health, but the listening process is not our server "
                f"(expected process group {self.proc.pid}, found {found}); refusing to talk to a stranger"
            )

    def _get_props(self) -> dict[str, Any]:
        try:
            answer = self._http.get(f"http://{HOST}:{self.port}/props", timeout=self.settings.request_timeout_s)
        except requests.RequestException as exc:
            raise NoVerdictError(f"{self.label}: GET /props failed: {exc}") from exc
        body = _json_or_none(answer)
        if answer.status_code != 200 or not isinstance(body, dict):
            raise NoVerdictError(f"{self.label}: GET /props answered {answer.status_code}, expected 200 with JSON")
        return body

    def stop(self) -> None:
        """TERM the whole group, KILL it after stop_timeout, and make sure nothing is left."""
        self._http.close()
        proc = self.proc
        if proc is None:
            return
        pgid = proc.pid
        t0 = time.monotonic()
        if proc.poll() is None or group_alive(pgid):
            self.progress(f"{self.label}: stopping (SIGTERM; the server may take a while to free the GPU)")
            signal_group(pgid, signal.SIGTERM)
            if not self._wait_gone(proc, pgid, self.settings.stop_timeout_s):
                self.needed_kill = True
                self.progress(f"{self.label}: still running {self.settings.stop_timeout_s:g} s after SIGTERM; SIGKILL")
                signal_group(pgid, signal.SIGKILL)
                if not self._wait_gone(proc, pgid, 10.0):
                    raise NoVerdictError(f"{self.label}: process group {pgid} survived SIGKILL")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        self.exit_code = proc.returncode
        self.stop_s = time.monotonic() - t0

    @staticmethod
    def _wait_gone(proc: subprocess.Popen[bytes], pgid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader so the group can empty
            if not group_alive(pgid):
                return True
            time.sleep(0.02)
        proc.poll()
        return not group_alive(pgid)

    # -- requests --------------------------------------------------------------------------
    def _sizes(self) -> tuple[int, int]:
        return self.stderr_path.stat().st_size, self.stdout_path.stat().st_size

    def complete(self, body: dict[str, Any]) -> Exchange:
        """Send one completion request (the exact body given) and wait for its answer."""
        assert self.proc is not None
        before = self._sizes()
        started = time.monotonic()
        self.in_flight = True
        try:
            answer = self._http.post(
                f"http://{HOST}:{self.port}/v1/chat/completions", json=body, timeout=self.settings.request_timeout_s
            )
        except requests.Timeout as exc:
            raise NoVerdictError(
                f"{self.label}: no answer within {self.settings.request_timeout_s:g} s (--request-timeout); "
                f"last log lines:\n{self.log_tail()}"
            ) from exc
        except requests.RequestException as exc:
            code = self._exit_code_soon()
            state = f"server exited with code {code}" if code is not None else "server still running"
            raise NoVerdictError(
                f"{self.label}: request failed ({exc.__class__.__name__}; {state}); last log lines:\n{self.log_tail()}"
            ) from exc
        elapsed = time.monotonic() - started
        response = _json_or_none(answer)
        if answer.status_code != 200 or not isinstance(response, dict):
            raise NoVerdictError(
                f"{self.label}: /v1/chat/completions answered HTTP {answer.status_code}, expected 200 with JSON; "
                f"last log lines:\n{self.log_tail()}"
            )
        self.in_flight = False
        after = self._sizes()
        return Exchange(body, response, elapsed, (before[0], after[0]), (before[1], after[1]))

    def _exit_code_soon(self, grace_s: float = 2.0) -> int | None:
        """The server's exit code if it is exiting (a dropped connection often precedes the exit)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self) -> str:
        """The end of both streams, for messages (stderr first: most diagnostics are there)."""
        parts = []
        for path in (self.stderr_path, self.stdout_path):
            try:
                with path.open("rb") as fh:
                    fh.seek(max(0, fh.seek(0, os.SEEK_END) - _LOG_TAIL_BYTES))
                    text = fh.read().decode("utf-8", errors="replace").rstrip()
            except OSError:
                text = ""
            if text:
                parts.append(f"[{path.stem}] {text}")
        return "\n".join(parts) or "(empty logs)"


def _json_or_none(answer: requests.Response) -> Any:
    try:
        return answer.json()
    except ValueError:
        return None


@contextlib.contextmanager
def launch(
    settings: ServerSettings,
    env: Mapping[str, str],
    log_dir: Path,
    progress: Callable[[str], None],
    label: str,
) -> Iterator[Server]:
    server = Server(settings, env, log_dir, progress, label)
    try:
        server.start()
        yield server
    finally:
        server.stop()
