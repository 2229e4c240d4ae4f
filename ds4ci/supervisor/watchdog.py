"""The sandbox watchdog: a process of its own that SIGKILLs every sandbox's init once ds4ci is gone.

A sandbox ends with ds4ci through a chain of parent-death signals (ds4ci, the outer bwrap, the
namespace's init, then the kernel kills the namespace); the watchdog does not rely on that chain.
It is started on the first sandboxed command, in a session of its own, and holds one end of a unix
socket pair: ds4ci sends it a pidfd of each sandbox's init (``SCM_RIGHTS``; a pidfd names that
very process, so a reused pid is never signalled). When ds4ci ends, however it ends, the kernel
closes ds4ci's end; the watchdog reads end-of-file, sends SIGKILL through every pidfd whose init
still runs (killing a PID namespace's init kills the whole namespace) and exits. A pidfd whose init
exited is closed as soon as it polls readable. On a normal exit ds4ci closes its end itself and
reaps the watchdog (``atexit``), so no zombie of it is left to PID 1.

The watchdog runs ``python -I -S`` on this file alone: no ds4ci import, nothing PR code could have
written (and it starts before any PR process, with the first one).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading

_lock = threading.Lock()
_state: dict[str, object] = {}  # "socket", "proc" once started; "failed" if it could not start


def watch(pidfd: int) -> bool:
    """Hand the watchdog a pidfd of a sandbox's init (it keeps its own copy); False when no watchdog runs."""
    with _lock:
        if not _state:
            _start()
        sock = _state.get("socket")
        if not isinstance(sock, socket.socket):
            return False
        try:
            socket.send_fds(sock, [b"w"], [pidfd])
        except OSError:
            return False
        return True


def _start() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), start_new_session=True, close_fds=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    except OSError:
        ours.close()
        _state["failed"] = True
        return
    finally:
        theirs.close()
    _state.update({"socket": ours, "proc": proc})
    atexit.register(_stop)


def _stop() -> None:
    """ds4ci is exiting normally: close its end (the watchdog kills what still runs, none by then) and reap it."""
    sock, proc = _state.get("socket"), _state.get("proc")
    if isinstance(sock, socket.socket):
        sock.close()
    if isinstance(proc, subprocess.Popen):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def _serve(fd: int) -> None:
    """The watchdog's loop (see the module docstring)."""
    sock = socket.socket(fileno=fd)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    inits: set[int] = set()
    while True:
        for ready, _ in poller.poll():
            if ready != sock.fileno():  # that init exited
                poller.unregister(ready)
                os.close(ready)
                inits.discard(ready)
                continue
            try:
                message, fds, _, _ = socket.recv_fds(sock, 16, 16)
            except OSError:
                message, fds = b"", []
            for pidfd in fds:
                inits.add(pidfd)
                poller.register(pidfd, select.POLLIN)
            if not message and not fds:  # end of file: ds4ci is gone
                for pidfd in inits:
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                return


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(int(sys.argv[1]))
