"""The sandbox watchdog: a process of its own that SIGKILLs every sandbox's init once ds4ci is gone.

A sandbox ends with ds4ci through a chain of parent-death signals (ds4ci, the outer bwrap, the
namespace's init, then the kernel kills the namespace); the watchdog does not rely on that chain.
It is started on the first sandboxed command, in a session of its own, and holds one end of a unix
socket pair: ds4ci tells it each scratch folder before making it, then sends it pidfds
(``SCM_RIGHTS``; a pidfd names that very process, so a reused pid is never signalled) of each
sandbox's outer bwrap (sent by that process itself, between fork and exec) and of its init once
bwrap reports it. When ds4ci ends, however it ends, the kernel
closes ds4ci's end; the watchdog reads end-of-file, sends SIGKILL through every pidfd whose
process still runs (killing a PID namespace's init kills the whole namespace; killing the outer
bwrap kills the init, ``--die-with-parent``) and exits. A pidfd whose init
exited is closed as soon as it polls readable. Once the inits it killed have exited (their
namespaces are empty then), it removes the scratch folder of every sandbox it was told of that
is still there, and every private folder of ds4ci's own it was told of (``new_private_folder``: the
copy of the server binary). On a normal exit ds4ci closes its end itself and
reaps the watchdog (``atexit``), so no zombie of it is left to PID 1.

The watchdog runs ``python -I -S`` on this file alone: no ds4ci import, nothing PR code could have
written (and it starts before any PR process, with the first one). ``remove_scratch`` lives here
for that reason: the watchdog and the sweep remove a scratch folder with the same code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

_END_WAIT_S = 10.0  # for the inits to exit after SIGKILL, before their scratch folders are removed
_UNWATCHED_WAIT_S = 1.0  # for a sandbox whose init was never told (ds4ci died while starting it) to end
# A message: a scratch folder, after a letter that says what comes with it: nothing yet, its outer bwrap's pidfd,
# its init's pidfd.
_SCRATCH, _OUTER, _INIT = b"s", b"o", b"i"
_FOLDER = b"f"  # a private folder of ds4ci's (no sandbox comes with it): removed once ds4ci is gone
_lock = threading.Lock()
_state: dict[str, object] = {}  # "socket", "proc" once started; "failed" if it could not start


def new_scratch() -> Path:
    """A fresh scratch folder in the temporary folder, told to the watchdog before it exists (so a ds4ci killed
    right after making it still has it removed)."""
    return _told_folder(_SCRATCH, "ds4ci-scratch-")


def new_private_folder(prefix: str) -> Path:
    """A fresh folder (mode 0700) in the temporary folder, named ``prefix`` and random hex, told to the watchdog
    before it exists: removed once ds4ci is gone, however it ends (a SIGKILL included)."""
    return _told_folder(_FOLDER, prefix)


def _told_folder(kind: bytes, prefix: str) -> Path:
    while True:
        path = Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(12)}"
        _send(kind + os.fsencode(path), [])
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # 96 random bits: never, in practice
            continue
        return path


def watch(pidfd: int, scratch: Path) -> bool:
    """Hand the watchdog a pidfd of the init of the sandbox whose scratch folder is ``scratch`` (it keeps its own
    copy of the pidfd); False when no watchdog runs."""
    return _send(_INIT + os.fsencode(scratch), [pidfd])


def outer_teller(scratch: Path) -> Callable[[], None]:
    """What the outer bwrap of that sandbox runs between fork and exec: it sends the watchdog a pidfd of itself, so
    the watchdog can end the sandbox (``--die-with-parent``) from before bwrap starts, whatever happens to ds4ci
    and to the parent-death signals. It only sends on a socket made beforehand: no lock, nothing to import."""
    with _lock:
        if not _state:
            _start()
        sock = _state.get("socket")
    message = _OUTER + os.fsencode(scratch)

    def tell() -> None:
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                pidfd = os.pidfd_open(os.getpid())
                socket.send_fds(sock, [message], [pidfd])
                os.close(pidfd)

    return tell


def _send(message: bytes, fds: list[int]) -> bool:
    with _lock:
        if not _state:
            _start()
        sock = _state.get("socket")
        if not isinstance(sock, socket.socket):
            return False
        try:
            socket.send_fds(sock, [message], fds)
        except OSError:
            return False
        return True


def _start() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one message per sandbox
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


def remove_scratch(root: Path) -> None:
    """Delete a scratch folder whatever PR code did to it, once nothing of it runs (best effort, never raises).

    PR code may have taken permissions away (``chmod 000`` on a folder: as an unprivileged user
    nothing below it can be listed or deleted) or nested folders deeper than a recursive delete
    can go. So the tree is flattened: each folder is given ``u+rwx`` back, and each folder found
    inside it is moved up to the top of the scratch folder before it is emptied in turn; two
    descriptors at a time, no recursion. Nothing is followed: entries are examined with ``lstat``
    (a symbolic link is removed as a link), folders opened with ``O_NOFOLLOW``.
    """
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return
        os.chmod(root, stat.S_IRWXU)  # noqa: PTH101 - a folder (lstat above), not a link
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for _ in range(3):  # again if a pass left something (an entry that refused once)
                _flatten_and_empty(top)
                if not os.listdir(top):  # noqa: PTH208 - a descriptor, no path
                    break
        finally:
            os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(root)  # noqa: PTH106


def _flatten_and_empty(top: int) -> None:
    """Remove everything below the folder ``top`` (see ``remove_scratch``)."""
    pending = os.listdir(top)
    moved = 0
    while pending:
        name = pending.pop()
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=top)
                continue
            os.chmod(name, stat.S_IRWXU, dir_fd=top)  # a folder (lstat above); nothing runs that could swap it
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            try:
                for entry in os.listdir(inner):  # noqa: PTH208 - a descriptor, no path
                    if not stat.S_ISDIR(os.stat(entry, dir_fd=inner, follow_symlinks=False).st_mode):
                        os.unlink(entry, dir_fd=inner)
                        continue
                    while True:  # a name free at the top (nothing else writes there any more)
                        moved += 1
                        up = f".ds4ci-removing-{moved}"
                        try:
                            os.stat(up, dir_fd=top, follow_symlinks=False)
                        except FileNotFoundError:
                            break
                    os.chmod(entry, stat.S_IRWXU, dir_fd=inner)  # moving a folder writes its ".."
                    os.rename(entry, up, src_dir_fd=inner, dst_dir_fd=top)
                    pending.append(up)
            finally:
                os.close(inner)
            os.rmdir(name, dir_fd=top)


def _serve(fd: int) -> None:
    """The watchdog's loop (see the module docstring)."""
    sock = socket.socket(fileno=fd)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    inits: set[int] = set()
    scratches: dict[Path, bool] = {}  # each scratch folder: was its init's pidfd told
    folders: set[Path] = set()  # ds4ci's private folders
    while True:
        for ready, _ in poller.poll():
            if ready != sock.fileno():  # that init exited
                poller.unregister(ready)
                os.close(ready)
                inits.discard(ready)
                continue
            try:
                message, fds, _, _ = socket.recv_fds(sock, 65536, 1)
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # end of file: ds4ci is gone
                _end(inits, scratches)
                for folder in folders:
                    remove_scratch(folder)
                return
            path = Path(os.fsdecode(message[1:]))
            if message[:1] == _FOLDER:
                folders.add(path)
                continue
            scratches[path] = scratches.get(path, False) or message[:1] == _INIT
            for pidfd in fds:
                inits.add(pidfd)
                poller.register(pidfd, select.POLLIN)


def _bwraps_of(scratches: dict[Path, bool]) -> list[int]:
    """The bwrap processes (outer and init: the same command line) that bind one of ``scratches`` as their /tmp.

    A second way to find a sandbox when ds4ci is gone, beside the pidfds: each scratch folder's name is random
    and only its own sandbox's bwrap names it, so no other process matches."""
    wanted = {os.fsencode(str(path)) for path in scratches}
    found = []
    for entry in os.listdir("/proc"):  # noqa: PTH208 - a plain scan of pids
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as fh:  # noqa: PTH123
                words = fh.read(1 << 16).split(b"\0")
            if words and words[0].endswith(b"bwrap") and wanted.intersection(words):
                found.append(int(entry))
    return found


def _end(inits: set[int], scratches: dict[Path, bool]) -> None:
    """SIGKILL every init still running (through its pidfd, and any bwrap found binding one of the scratch
    folders), wait until each has exited (its namespace is empty then), remove the scratch folders that are left."""
    for pidfd in inits:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    for pid in _bwraps_of(scratches):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    waiting = select.poll()
    for pidfd in inits:
        waiting.register(pidfd, select.POLLIN)
    deadline = time.monotonic() + _END_WAIT_S
    left = set(inits)
    while left and time.monotonic() < deadline:
        for ready, _ in waiting.poll(100):
            waiting.unregister(ready)
            left.discard(ready)
    if not all(scratches.values()):  # its sandbox ends through the death-signal chain alone
        time.sleep(_UNWATCHED_WAIT_S)
    for scratch in scratches:
        remove_scratch(scratch)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _serve(int(sys.argv[1]))
