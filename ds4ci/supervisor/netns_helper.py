"""Makes sockets inside a sandbox's network namespace for ds4ci (run as ``python -I -S`` on this file alone).

``netns_helper.py FD PID INODE``: opens ``/proc/PID/ns/net`` and checks that it is the namespace bwrap
reported (inode ``INODE``, so a reused pid is never entered), enters the user namespace that owns it
first when that is not its own (an unprivileged bwrap's: only a single-threaded process may, hence a
process of its own), then the network namespace. It then answers each message on the socket ``FD`` with one fresh,
unconnected TCP socket (``SCM_RIGHTS``): a socket belongs to the namespace it was made in, so ds4ci's
``connect`` to 127.0.0.1 reaches the server's loopback, never the host's. It exits at end-of-file (ds4ci
closed its end or is gone). A failure to enter is one line on stderr and exit status 3.

No ds4ci import: nothing pull-request code could have written runs here.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)


def _enter(pid: int, inode: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if os.fstat(net).st_ino != inode:
        raise OSError(0, f"pid {pid} is no longer in the sandbox's network namespace (inode {inode})")
    user = fcntl.ioctl(net, NS_GET_USERNS)  # the user namespace that owns it (bwrap may nest one more below)
    own = os.stat("/proc/self/ns/user").st_ino  # noqa: PTH116 - no pathlib import in the helper
    if os.fstat(user).st_ino != own and libc.setns(user, CLONE_NEWUSER) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns into the sandbox's user namespace: {os.strerror(code)}")
    if libc.setns(net, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns into the sandbox's network namespace: {os.strerror(code)}")
    os.close(net)
    os.close(user)


def main(fd: int, pid: int, inode: int) -> int:
    channel = socket.socket(fileno=fd)
    try:
        _enter(pid, inode)
    except OSError as exc:
        sys.stderr.write(f"{exc.strerror or exc}\n")
        return 3
    channel.send(b"r")  # ready: inside
    while channel.recv(16):
        made = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            socket.send_fds(channel, [b"s"], [made.fileno()])
        finally:
            made.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
