"""Helper processes the lifecycle faults leave behind, for the gate to find and kill.

Both fork before any thread exists (forking a threaded process is unsafe).

- ``fork-helper``: a child in the server's process group that holds the listening socket,
  ignores TERM/INT/HUP and outlives the server; only a KILL of the group ends it.
- ``setsid-helper``: a double-forked daemon in a session (and process group) of its own, so a
  KILL of the server's group does not reach it. It closes every inherited descriptor (the log
  and the listening socket included), writes its pid to ``DS4SIM_HELPER_PID_FILE`` when that is
  set, and exits by itself after ``SETSID_HELPER_LIFETIME_S`` so nothing lingers for ever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from ds4ci.simulator.logs import Log

SETSID_HELPER_LIFETIME_S = 50.0


def fork_helper(log: Log) -> None:
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            while True:
                signal.pause()
        finally:
            os._exit(0)
    log.line(f"ds4ci-sim: forked helper pid {pid} holding the listening socket (fault fork-helper)")


def _write_pid_file(path: Path, pid: int) -> None:
    with contextlib.suppress(OSError):
        partial = path.with_name(f".{path.name}.{pid}.tmp")
        partial.write_text(f"{pid}\n", encoding="ascii")
        partial.replace(path)


def _daemon(pid_file: Path | None, report_fd: int) -> None:
    """The grandchild: report the pid, let go of everything inherited, live a while, exit."""
    pid = os.getpid()
    if pid_file is not None:
        _write_pid_file(pid_file, pid)  # before the report: once the server is ready, the file is there
    os.write(report_fd, f"{pid}\n".encode("ascii"))
    os.close(report_fd)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    time.sleep(SETSID_HELPER_LIFETIME_S)


def setsid_helper(pid_file: Path | None, log: Log) -> None:
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read_fd)
            os.setsid()
            if os.fork() == 0:
                _daemon(pid_file, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(child, 0)
    with os.fdopen(read_fd, "rb") as report:
        text = report.read().decode("ascii", errors="replace").strip()
    log.line(
        f"ds4ci-sim: setsid helper pid {text or '?'} runs in its own session for up to "
        f"{SETSID_HELPER_LIFETIME_S:.0f} s (fault setsid-helper)"
    )
