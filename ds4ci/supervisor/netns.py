"""How ds4ci reaches a server that runs in a network namespace of its own (``View(own_network=True)``).

bwrap's ``--unshare-net`` gives the sandbox a fresh namespace with only a loopback interface: the server
binds 127.0.0.1 there, and nothing of the host (its loopback TCP services, its abstract Unix sockets,
which are scoped by network namespace, its other interfaces) is in reach. ds4ci talks to the server
through sockets made inside that namespace by a small helper process (``netns_helper.py``, started on
the first connection): a socket belongs to the namespace it was made in, so connecting it to
127.0.0.1:PORT reaches the server's loopback. Only ds4ci holds the channel to the helper; the helper
exits when the channel closes (ds4ci stops the server, or ds4ci is gone).
"""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

from ds4ci.supervisor.child import SupervisorError

_HELPER = Path(__file__).with_name("netns_helper.py")
_READY_S = 10.0


class NetnsError(SupervisorError):
    """The sandbox's network namespace could not be entered (the message says why)."""


class Connector:
    """Fresh TCP sockets inside the network namespace of the process ``pid`` (inode ``inode``, as bwrap reported)."""

    def __init__(self, pid: int, inode: int) -> None:
        self.pid, self.inode = pid, inode
        self._lock = threading.Lock()
        self._channel: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_HELPER), str(theirs.fileno()), str(self.pid), str(self.inode)],
                pass_fds=(theirs.fileno(),), close_fds=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            ours.close()
            raise NetnsError(f"cannot start the network-namespace helper: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        ready, _, _ = select.select([ours], [], [], _READY_S)
        if not ready or ours.recv(16) != b"r":
            ours.close()
            self._proc.kill()
            _, said = self._proc.communicate()
            why = said.decode("utf-8", errors="replace").strip()[:300] or f"no answer within {_READY_S:g} s"
            raise NetnsError(f"cannot enter the server's network namespace (pid {self.pid}): {why}")
        self._channel = ours
        return ours

    def socket(self) -> socket.socket:
        """A new, unconnected TCP socket of the namespace (NetnsError when the namespace cannot be entered)."""
        with self._lock:
            channel = self._channel or self._start()
            try:
                channel.send(b"s")
                _, fds, _, _ = socket.recv_fds(channel, 16, 1)
            except OSError as exc:
                raise NetnsError(f"the network-namespace helper stopped answering: {exc.strerror or exc}") from exc
            if len(fds) != 1:
                raise NetnsError("the network-namespace helper sent no socket (the server's namespace is gone)")
            return socket.socket(fileno=fds[0])

    def close(self) -> None:
        """End the helper (it exits at end-of-file) and reap it."""
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.communicate(timeout=5)
                if self._proc.returncode is None:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None
