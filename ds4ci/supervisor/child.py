"""One supervised command: start it through the keeper shim, watch it, stop it, sweep what it left."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Union

import psutil

from ds4ci.supervisor import procs
from ds4ci.supervisor.procs import KilledProcess

SHIM = Path(__file__).with_name("shim.py")
NAMESPACE: Final = "pid-namespace"
FALLBACK: Final = "subreaper+sweep"
STDOUT = subprocess.STDOUT
DEFAULT_KILL_WAIT_S = 10.0
_POLL_S = 0.02

# Every keeper is started from this one long-lived thread: a parent-death signal fires when the
# *thread* that forked the child ends, so a child started from a short-lived worker thread would
# be killed with it. This thread ends only when the interpreter shuts down.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ds4ci-spawner")

# A path (truncated), an open file, a descriptor, STDOUT, or None (/dev/null).
Output = Union[Path, IO[bytes], int, None]  # noqa: UP007 - a runtime alias, evaluated on 3.10 too


class SupervisorError(RuntimeError):
    """The supervisor could not start or contain a command (the message says what and why)."""


class Unkillable(SupervisorError):
    """A process survived SIGKILL (uninterruptible sleep in a driver, typically) and was given up on."""


class StartTimeout(SupervisorError, TimeoutError):
    """The command did not exec within the start timeout (a hung mount, typically); it was killed."""

    def __init__(self, message: str, child: Child) -> None:
        super().__init__(message)
        self.child = child


def _pidfd(pid: int, parent: int) -> int | None:
    """A pidfd for ``pid`` if it is still ``parent``'s child (so not a reused pid), else None."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    try:
        if psutil.Process(pid).ppid() == parent:
            return fd
    except psutil.Error:
        pass
    os.close(fd)
    return None


ADOPTION_WAIT_S = 2.0  # how long an exited keeper may stay the ending outer process's zombie before it is ours


class Child:
    """A running command under supervision. Create with ``Supervisor.spawn``; see the package docstring."""

    def __init__(self, proc: subprocess.Popen[bytes], report_fd: int, token: str, argv: Sequence[str]) -> None:
        self._proc = proc
        self._fd: int | None = report_fd
        self._buffer = b""
        self._pidfd: int | None = None
        self._seen: set[int] = set()
        self.argv = tuple(argv)
        self.token = token
        self.containment = ""
        self.notes: list[str] = []
        self.keeper_pid = 0
        self.pid = 0
        self.started = False
        self.error: tuple[str, int, str] | None = None
        self.returncode: int | None = None
        self.killed: list[KilledProcess] = []
        self.swept = False
        # A fresh TCP socket inside the command's own network namespace (the sandbox's ``own_network``), which is
        # how ds4ci reaches it; None: the command shares ds4ci's network, reached by a plain socket.
        self.new_socket: Callable[[], socket.socket] | None = None
        self.scratch_quota: int | None = None  # the size of the sandbox's tmpfs /tmp (None: no quota)
        self.scratch_full: bool | None = None  # with a quota: was that tmpfs full once the command ended

    # -- the report pipe -------------------------------------------------------------------
    def _handle(self, line: str) -> None:
        word, _, rest = line.partition(" ")
        if word == "mode":
            self.containment = rest
        elif word == "note":
            self.notes.append(rest)
        elif word == "keeper" and rest.isdigit():
            self.keeper_pid = int(rest)
            if self.containment == NAMESPACE:
                self._pidfd = _pidfd(self.keeper_pid, self._proc.pid)
        elif word == "pid" and rest.isdigit():
            self.pid = int(rest)
        elif word == "started":
            self.started = True
        elif word == "error":
            stage, _, tail = rest.partition(" ")
            number, _, text = tail.partition(" ")
            self.error = (stage, int(number) if number.isdigit() else 0, text)
        elif word == "exit":
            with contextlib.suppress(ValueError):
                self.returncode = int(rest)

    def _pump(self, timeout: float) -> None:
        """Read what the keeper reported (waiting up to ``timeout``); at EOF settle the exit status."""
        if self._fd is None:
            return
        if timeout > 0:
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            if not poller.poll(timeout * 1000):
                return
        while self._fd is not None:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self._fd)
                self._fd = None
                break
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._handle(line.decode("utf-8", errors="replace"))

    def _await_start(self, deadline: float | None) -> bool:
        while not self.started and self.error is None and self._fd is not None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            self._pump(min(left, 1.0))
        return True

    # -- state -----------------------------------------------------------------------------
    def poll(self) -> int | None:
        """The command's exit status as ``Popen.returncode`` (-N: killed by signal N), or None while it runs."""
        self._pump(0)
        if self.returncode is None and self._fd is None and self._proc.poll() is not None:
            # The keeper is gone without reporting: it was SIGKILLed and the command went with
            # it (outer exits only once the namespace is empty; in the fallback the command has
            # a death signal of its own).
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the command to exit; None if it still runs after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            if self._fd is None:
                time.sleep(min(left, _POLL_S))  # report closed, outer still emptying its namespace
            else:
                self._pump(min(left, 1.0))
        return self.returncode

    def owns(self, pid: int) -> bool:
        """Is host ``pid`` the command or one of its descendants (in its namespace), or does it carry our token?"""
        if pid in self.keepers or not self.keeper_pid:
            return False
        if procs.is_descendant(pid, self.keeper_pid):
            return True
        if not self.token:
            return False
        with contextlib.suppress(psutil.Error):
            return psutil.Process(pid).environ().get(procs.TOKEN_VARIABLE) == self.token
        return False

    @property
    def keepers(self) -> frozenset[int]:
        """Host pids of the shim processes (outer and, in a namespace, its init): ours, not the command."""
        return frozenset(pid for pid in (self._proc.pid, self.keeper_pid) if pid)

    # -- stopping --------------------------------------------------------------------------
    def send_signal(self, sig: int) -> None:
        """Signal the command: the keeper forwards it to the whole namespace, or to the command's group."""
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL the command and everything it started (namespace: then its init, so the kernel kills all).

        Everything is frozen first (``procs.freeze``) and killed one by one, to name it: a process forked after a
        single listing would go down unnamed with the namespace (or outlive this call in the fallback).
        """
        if self.keeper_pid:
            keeper = self.keeper_pid
            self.killed.extend(procs.freeze_and_kill(lambda: procs.descendants(keeper), "descendant", self._seen))
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def terminate(self, grace_s: float, kill_wait_s: float = DEFAULT_KILL_WAIT_S) -> bool:
        """SIGTERM to the whole group or namespace, SIGKILL after ``grace_s``; True if the kill was needed.

        Raises ``Unkillable`` if the command is still there ``kill_wait_s`` after SIGKILL.
        """
        if self.poll() is not None:
            return False
        deadline = time.monotonic() + grace_s
        self.send_signal(signal.SIGTERM)
        if self.wait(grace_s) is not None:
            self._let_the_rest_stop(deadline)
            return False
        self.kill()
        if self.wait(kill_wait_s) is None:
            raise Unkillable(f"{self.argv[0]} (pid {self.pid}) survived SIGKILL for {kill_wait_s:g} s")
        return True

    def _let_the_rest_stop(self, deadline: float) -> None:
        """The command went at SIGTERM: what it started got the signal too, and the rest of the grace to act on it.

        The keeper ends once nothing of the command is left; ``sweep`` kills whatever is still there at ``deadline``.
        """
        while self._proc.poll() is None and time.monotonic() < deadline:
            time.sleep(_POLL_S)

    def sweep(self, kill_wait_s: float = DEFAULT_KILL_WAIT_S) -> list[KilledProcess]:
        """Kill and reap everything left (the command too, if it still runs); return what was killed.

        Afterwards no descendant of the command and no process carrying its token is left, or
        ``Unkillable`` is raised naming what survived SIGKILL.
        """
        deadline = time.monotonic() + kill_wait_s
        self.poll()
        while self._proc.poll() is None:
            # The keeper exits by itself once the command is gone and it has no child left.
            self.kill()
            if time.monotonic() >= deadline:
                left = ", ".join(str(p.pid) for p in procs.descendants(self.keeper_pid)) or "the keeper"
                raise Unkillable(f"{self.argv[0]}: still running {kill_wait_s:g} s after SIGKILL: {left}")
            time.sleep(_POLL_S)
        self._pump(0)
        # Descendants that escaped the keeper's tree (the keeper died early) still carry the token.
        while self.token and (holders := procs.token_holders(self.token, exclude=(self._proc.pid,))):
            if time.monotonic() >= deadline:
                raise Unkillable(f"{self.argv[0]}: processes with its token survived SIGKILL: {holders}")
            self.killed.extend(procs.freeze_and_kill(
                lambda: procs.token_holders(self.token, exclude=(self._proc.pid,)), "token", self._seen
            ))
            psutil.wait_procs(holders, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            procs.reap_adopted(p.pid for p in holders)
        procs.reap_adopted(self._seen)
        self._reap_keeper(deadline)
        self._close()
        self._cleanup()
        self.swept = True
        return list(self.killed)

    def _reap_keeper(self, deadline: float) -> None:
        """Reap the keeper if it was re-parented to us (a subreaper) because the outer process ended first.

        bwrap's outer process exits as soon as its init reports the command's exit, without waiting
        for the init: the init ends as our zombie, and at our exit PID 1's (which may never reap
        it). The pidfd names that very process, so no other child's status is ever taken.
        """
        if self._pidfd is None:
            return
        deadline = min(deadline, time.monotonic() + ADOPTION_WAIT_S)
        while True:
            try:
                if os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG) is not None:
                    return  # reaped
            except ChildProcessError:  # not our child (yet): it comes to us once the outer process exits
                if not procs.is_others_zombie(self.keeper_pid):  # exited, and the ending outer process's zombie
                    return  # the outer process reaped it, or it lives on (the sweep kills what is left)
            except OSError:
                return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)

    def _cleanup(self) -> None:
        """What a kind of child removes once everything is gone (the sandbox: its scratch folder)."""

    def abandon(self) -> None:
        """Give up waiting (something ignores SIGKILL): a daemon thread waits, then sweeps until it can."""

        def finish() -> None:
            self.wait()
            while True:
                try:
                    self.sweep(kill_wait_s=60.0)
                    return
                except Unkillable:
                    continue

        threading.Thread(target=finish, name=f"sweep-{self.pid}", daemon=True).start()

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.returncode is None:
            self.returncode = -signal.SIGKILL

    def __enter__(self) -> Child:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.swept:
            try:
                self.terminate(0.0 if exc_type is not None else 5.0)
            finally:
                self.sweep()


def await_or_sweep(child: Child, started: Callable[[float | None], bool], start_timeout: float | None) -> None:
    """Wait (``started`` takes a deadline) until ``child`` runs; on a timeout or any error, nothing is left."""
    try:
        if not started(None if start_timeout is None else time.monotonic() + start_timeout):
            raise StartTimeout(f"{child.argv[0]} did not start within {start_timeout:g} s", child)
    except BaseException:
        try:
            child.sweep()
        except Unkillable:
            child.abandon()
        raise


def _limit_file_size(limit: int | None) -> Callable[[], None] | None:
    if limit is None:
        return None

    def apply() -> None:  # runs in the keeper between fork and exec; inherited by the command
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _open_output(target: Output, stack: contextlib.ExitStack) -> IO[bytes] | int | None:
    if isinstance(target, Path):
        return stack.enter_context(target.open("wb"))
    return subprocess.DEVNULL if target is None else target


def spawn(
    argv: Sequence[str],
    mode: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdout: Output = None,
    stderr: Output = None,
    start_timeout: float | None = None,
    file_size_limit: int | None = None,
) -> Child:
    """Start ``argv`` through the keeper shim; return once it has exec'd (see ``Supervisor.spawn``)."""
    if not argv:
        raise ValueError("spawn needs a command, found an empty argv")
    token = procs.new_token()
    environ = dict(os.environ if env is None else env)
    environ[procs.TOKEN_VARIABLE] = token
    read_fd, write_fd = os.pipe()
    shim_argv = [sys.executable, "-I", "-S", str(SHIM), str(write_fd), mode, str(os.getpid()), str(cwd or ""), "--", *argv]
    try:
        with contextlib.ExitStack() as stack:
            out, err = _open_output(stdout, stack), _open_output(stderr, stack)
            proc = _SPAWNER.submit(
                subprocess.Popen,
                shim_argv,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(write_fd,),
                start_new_session=True,
                close_fds=True,
                preexec_fn=_limit_file_size(file_size_limit),
            ).result()
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    os.set_blocking(read_fd, False)
    child = Child(proc, read_fd, token, argv)
    await_or_sweep(child, child._await_start, start_timeout)
    if child.error is not None:
        stage, number, text = child.error
        child.sweep()
        if stage in ("chdir", "exec") and number:
            raise OSError(number, os.strerror(number), str(cwd) if stage == "chdir" else argv[0])
        raise SupervisorError(f"cannot start {argv[0]}: {stage} failed: {text or os.strerror(number)}")
    if not child.started:
        child.sweep()
        raise SupervisorError(f"cannot start {argv[0]}: the keeper exited before the command started")
    return child
