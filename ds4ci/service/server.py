"""``ds4ci service run``: the socket, one thread per connection, one queue per runner.

The socket is the one systemd passes (socket activation, ``LISTEN_FDS``) or one bound here at
``--socket`` with mode 0660 (group ``--socket-group``, the runner user's). Each connection carries
one request: the peer's credentials are read from the kernel (SO_PEERCRED), the request frame is
read under a byte cap and a deadline, checked, queued on its runner's queue, and answered with
``queued`` (its place), ``running``, then ``done`` with the gate's exit code and the files; or
``refused`` (a bad request: exit 2), ``busy`` (the queue is full) or ``error``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.service import job
from ds4ci.service.protocol import (
    MAX_REQUEST,
    PROTOCOL,
    FrameError,
    GateRequest,
    RequestRefused,
    parse_request,
    recv_json,
    send_file,
    send_json,
)
from ds4ci.service.queue import Busy, RunnerQueue, Ticket

REQUEST_DEADLINE_S: Final = 10.0  # to send the whole request frame, however slowly
SEND_TIMEOUT_S: Final = 300.0
_SYSTEMD_FD: Final = 3
_PEERCRED = struct.Struct("3i")


def log(message: str) -> None:
    print(f"ds4ci service: {message}", file=sys.stderr, flush=True)


def peer_of(conn: socket.socket) -> job.Peer:
    pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return job.Peer(pid, uid, gid)


def _hung_up(conn: socket.socket) -> bool:
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLRDHUP)
    if not poller.poll(0):
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


class Service:
    def __init__(self, settings: job.Settings, runners: Sequence[str], depth: int, max_connections: int) -> None:
        self.settings = settings
        self.queues = {name: RunnerQueue(name, depth, self._work) for name in runners}
        self._numbers = itertools.count(1)
        self._slots = threading.BoundedSemaphore(max_connections)

    def _work(self, ticket: Ticket) -> job.Outcome:
        request, peer, received = ticket.payload
        log(f"request {ticket.number}: gate starts (runner {request.runner}, head {request.head})")
        outcome = job.run(self.settings, request, peer, ticket.number, received)
        log(f"request {ticket.number}: gate exited {outcome.exit_code}; record {outcome.record}")
        return outcome

    def accept(self, conn: socket.socket) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                conn.settimeout(5.0)
                send_json(conn, _answer("busy", message="the service holds its most connections now; try again later"))
            except OSError:
                pass
            conn.close()
            return
        threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        number = next(self._numbers)
        try:
            self._converse(conn, number)
        except (OSError, FrameError) as exc:
            log(f"request {number}: the conversation ended early: {exc}")
        finally:
            conn.close()
            self._slots.release()

    def _converse(self, conn: socket.socket, number: int) -> None:
        peer = peer_of(conn)
        who = f"pid {peer.pid} uid {peer.uid} gid {peer.gid}"
        try:
            request = _read_request(conn)
            queue = self.queues.get(request.runner)
            if queue is None:
                raise RequestRefused(f"runner: this service gates {', '.join(sorted(self.queues))}; found "
                                     f"{request.runner!r}")
            ticket = Ticket(number, (request, peer, time.time()))
            position = queue.submit(ticket)
        except (FrameError, RequestRefused) as exc:
            log(f"request {number} from {who}: refused: {exc}")
            send_json(conn, _answer("refused", message=str(exc), peer=asdict(peer)))
            return
        except Busy as exc:
            log(f"request {number} from {who}: busy: {exc}")
            send_json(conn, _answer("busy", message=str(exc), peer=asdict(peer)))
            return
        log(f"request {number} from {who}: runner {request.runner} head {request.head} base {request.base}: "
            f"queued at {position}")
        try:
            send_json(conn, _answer("queued", position=position, peer=asdict(peer), request=number))
            self._await(conn, ticket)
        except BaseException:
            ticket.gone.set()  # nobody will receive it: skipped if it has not started yet
            raise

    def _await(self, conn: socket.socket, ticket: Ticket) -> None:
        said_running = False
        while not ticket.done.wait(1.0):
            if ticket.started.is_set() and not said_running:
                said_running = True
                with contextlib.suppress(OSError):  # the run goes on and keeps its evidence either way
                    send_json(conn, _answer("running"))
            if not ticket.started.is_set() and _hung_up(conn):
                ticket.gone.set()
        outcome: job.Outcome | None = ticket.outcome
        if outcome is None:
            send_json(conn, _answer("error", message=f"no gate ran: {ticket.failure}"))
            return
        try:
            send_json(conn, _answer("done", exit_code=outcome.exit_code, message=outcome.message,
                                    files=[name for name, _ in outcome.files], record=str(outcome.record)))
            for name, path in outcome.files:
                send_file(conn, name, path)
        finally:
            job.clean(outcome, self.settings.keep_work)

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for queue in self.queues.values():
            queue.join(max(0.0, deadline - time.monotonic()))


def _read_request(conn: socket.socket) -> GateRequest:
    """The one request frame, whole within REQUEST_DEADLINE_S; answers are then sent under SEND_TIMEOUT_S."""
    try:
        return parse_request(recv_json(conn, MAX_REQUEST, "request", time.monotonic() + REQUEST_DEADLINE_S))
    finally:
        conn.settimeout(SEND_TIMEOUT_S)


def _answer(status: str, **fields: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "status": status, **{k: v for k, v in fields.items() if v is not None}}


def systemd_socket() -> socket.socket | None:
    """The listening socket systemd passed (LISTEN_PID is this process, LISTEN_FDS >= 1), else None."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()) or int(os.environ.get("LISTEN_FDS", "0") or 0) < 1:
        return None
    try:
        sock = socket.socket(fileno=_SYSTEMD_FD)
    except OSError as exc:
        raise UsageError(f"LISTEN_FDS says systemd passed a socket on fd {_SYSTEMD_FD}, but it is not one: "
                         f"{exc.strerror or exc}") from exc
    if sock.family != socket.AF_UNIX:
        raise UsageError("the socket systemd passed is not a Unix socket; expected ListenStream=/run/ds4ci/gate.sock")
    return sock


def bind(path: Path, group: str | None) -> socket.socket:
    """A Unix socket at ``path``, mode 0660, group ``group``; a stale socket file is replaced, anything else refused."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        found = None
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise UsageError(f"--socket {path} exists and is not a socket; expected a free path")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # nobody listens: a socket a stopped service left
        else:
            raise UsageError(f"--socket {path}: another service listens there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # never reachable by others, not even between bind and chmod
    try:
        sock.bind(str(path))
    except OSError as exc:
        raise UsageError(f"--socket {path}: cannot listen there: {exc.strerror or exc}") from exc
    finally:
        os.umask(old)
    if group is not None:
        import grp

        try:
            os.chown(path, -1, grp.getgrnam(group).gr_gid)
        except (KeyError, OSError) as exc:
            path.unlink()
            raise UsageError(f"--socket-group {group}: cannot give the socket to that group: {exc}") from exc
    path.chmod(0o660)
    sock.listen(64)
    return sock


def check_key(path: Path) -> None:
    """The signing key: a regular file of this user's that nobody else can read; loadable."""
    from ds4ci.evidence import keys

    try:
        found = path.lstat()
    except OSError as exc:
        raise UsageError(f"--signing-key {path}: {exc.strerror or exc}; make it with `ds4ci service install`") from exc
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
        raise UsageError(f"--signing-key {path}: expected a regular file owned by this user (uid {os.geteuid()}) with "
                         f"mode 0600, found uid {found.st_uid} mode {stat.filemode(found.st_mode)}; only the service "
                         "may read the runner key")
    keys.load_private(path)


def check_state_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = path.stat()
    if found.st_uid != os.geteuid() or found.st_mode & 0o077:
        raise UsageError(f"--state-dir {path}: expected a folder of this user's with mode 0700, found uid "
                         f"{found.st_uid} mode {stat.filemode(found.st_mode)}")


def serve(settings: job.Settings, runners: Sequence[str], socket_path: Path | None, group: str | None,
          depth: int, max_connections: int) -> int:
    """Run until SIGTERM or SIGINT; 0 after a clean stop."""
    from ds4ci.supervisor import sandbox

    refusal = sandbox.refusal()
    if refusal is not None:  # PR code would run unsandboxed as the user that reads the key
        raise NoVerdictError(f"the gate service requires the sandbox, which cannot run here: {refusal}")
    check_key(settings.signing_key)
    check_state_dir(settings.state_dir)
    listener = systemd_socket()
    owned = None
    if listener is None:
        if socket_path is None:
            raise UsageError("--socket: expected a path to listen on (or a socket passed by systemd)")
        listener, owned = bind(socket_path, group), socket_path
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service = Service(settings, runners, depth, max_connections)
    listener.settimeout(0.5)
    log(f"listening on {owned or 'the socket systemd passed'} ({PROTOCOL}); runners: {', '.join(runners)}")
    try:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            service.accept(conn)
    finally:
        listener.close()
        if owned is not None:
            owned.unlink(missing_ok=True)
        service.close()
        job.stop_running()
        service.join(job.STOP_GRACE_S)  # each gate stopped keeps its evidence and its request record
        log("stopped")
    return 0
