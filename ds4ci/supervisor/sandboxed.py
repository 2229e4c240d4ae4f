"""One command under bubblewrap: bwrap is the PID namespace's init, so no Python keeper is started.

Host view: ds4ci ── bwrap (outer: monitors, writes JSON status) ── bwrap init (pid 1 of the new
PID namespace, reaps orphans) ── the command (pid 2) ── ...

- the outer bwrap carries a parent-death signal (SIGKILL, set between fork and exec) and
  ``--die-with-parent`` gives the sandboxed processes one too: a SIGKILL of ds4ci takes down the
  outer bwrap, then the namespace's init, and the kernel kills everything left in the namespace;
  the watchdog (``watchdog.py``), a process of its own holding a pidfd of each init, SIGKILLs the
  inits when ds4ci is gone without relying on that chain, and removes their scratch folders;
- the init often outlives the outer bwrap and is re-parented to ds4ci (a subreaper): the sweep
  reaps it through its pidfd;
- bwrap's JSON status (``--json-status-fd``) says the init's host pid (the keeper), its network
  namespace (for a command with a network of its own, reached through ``netns.Connector``: its
  ``new_socket``) and, at the end, the command's exit status (128+N for signal N, reported as -N like
  ``Popen.returncode``);
- a command with a scratch quota (``View.scratch_bytes``) has a tmpfs of that size as ``/tmp``, private
  to its mount namespace: ds4ci opens it (through ``/proc/<init>/root/tmp``) once the command runs, and
  that descriptor keeps it readable after the sandbox is gone, for ``before_cleanup`` and for
  ``scratch_full`` (was it full when the command ended);
- signals go to every process of the namespace (a namespace's init ignores signals it has no
  handler for, so they are sent to its descendants one by one).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import psutil

from ds4ci.supervisor import netns, procs, sandbox, watchdog
from ds4ci.supervisor.child import _SPAWNER, Child, Output, _open_output, _pidfd, await_or_sweep
from ds4ci.supervisor.procs import KilledProcess
from ds4ci.supervisor.watchdog import remove_scratch

SANDBOX: Final = sandbox.SANDBOX
_PR_SET_PDEATHSIG = 1
_SIGNAL_BASE = 128
_decoder = json.JSONDecoder()


class SandboxChild(Child):
    """A command running under bwrap (see the module docstring); the API is ``Child``'s."""

    def __init__(
        self, proc: subprocess.Popen[bytes], status_fd: int, argv: Sequence[str], scratch: Path, own_network: bool = False,
        scratch_quota: int | None = None,
    ) -> None:
        super().__init__(proc, status_fd, "", argv)
        self.scratch_quota = scratch_quota  # None: the scratch folder is its /tmp
        self._tmp_fd: int | None = None
        self.own_network = own_network
        self.connector: netns.Connector | None = None
        self.containment = SANDBOX
        self.scratch = scratch
        self.before_cleanup: Callable[[Path], None] | None = None  # called with the scratch folder before its removal
        self._text = ""
        self._helpers: dict[int, KilledProcess] | None = {}  # None once the command's exit was settled
        self._stopped = False  # ds4ci signalled the namespace (terminate, kill, a timeout)

    def _feed(self, chunk: bytes) -> None:
        self._text += chunk.decode("utf-8", errors="replace")
        while self._text.strip():
            try:
                doc, end = _decoder.raw_decode(self._text.lstrip())
            except json.JSONDecodeError:
                return  # the rest of the document is still on its way
            self._text = self._text.lstrip()[end:]
            if isinstance(doc, dict):
                self._status(doc)

    def _status(self, doc: dict[str, object]) -> None:
        pid, code = doc.get("child-pid"), doc.get("exit-code")
        if isinstance(pid, int) and not self.keeper_pid:
            self.keeper_pid = pid
            inode = doc.get("net-namespace")  # an older bwrap does not say: the init's, read now (it is the init's pid)
            if self.own_network and not isinstance(inode, int):
                with contextlib.suppress(OSError):
                    inode = os.stat(f"/proc/{pid}/ns/net").st_ino  # noqa: PTH116 - a pseudo-file of /proc
            if self.own_network and isinstance(inode, int):
                self.connector = netns.Connector(pid, inode)
                self.new_socket = self.connector.socket
            self._pidfd = _pidfd(pid, self._proc.pid)
            if self._pidfd is not None:
                watchdog.watch(self._pidfd, self.scratch)  # killed, and its scratch removed, once ds4ci is gone
        if isinstance(code, int):
            self.returncode = -(code - _SIGNAL_BASE) if _SIGNAL_BASE < code <= _SIGNAL_BASE + 64 else code

    def await_command(self, deadline: float | None) -> bool:
        """Wait until bwrap reported its init and the init forked the command (whose pid is ``pid``)."""
        while not self.keeper_pid and self._fd is not None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            self._pump(min(left, 1.0))
        while self.keeper_pid and not self.pid:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(self.keeper_pid).children()
                if children:
                    self.pid = children[0].pid
                    break
            if self.poll() is not None or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(0.002)
        self.pid = self.pid or self.keeper_pid or self._proc.pid
        self.started = True
        if self.scratch_quota is not None:
            self._open_tmp()
        return True

    def _open_tmp(self) -> None:
        """Hold the sandbox's own /tmp (its tmpfs) open; its init set the mounts up before it forked the command."""
        for pid in (self.keeper_pid, self.pid):
            with contextlib.suppress(OSError):
                self._tmp_fd = os.open(f"/proc/{pid}/root{sandbox.INSIDE_TMP}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                return

    def poll(self) -> int | None:
        """As ``Child.poll``; when bwrap ended without a status (it could not set the sandbox up), its exit code.

        When the command exits, bwrap's init exits and the kernel kills whatever else ran in the
        namespace. When ds4ci stopped the command (SIGTERM to the whole namespace, or SIGKILL), the
        processes last seen still running are recorded in ``killed``, as a sweep would. When the
        command exits by itself they are not (a child it was waiting for would look the same), so
        helpers left by a command that ended on its own are killed without being named.
        """
        if self.returncode is None and self.keeper_pid and self.pid:
            self._remember_helpers()
        code = super().poll()
        if code is not None and not self.keeper_pid and self._proc.returncode is not None:
            self.returncode = code = self._proc.returncode
        if code is not None and self._helpers is not None:
            if self._stopped:  # the namespace's init is gone: named here unless ds4ci's kill named them already
                self.killed.extend(r for pid, r in sorted(self._helpers.items()) if pid not in self._seen)
                self._seen.update(self._helpers)  # named once, even if a sweep still finds them dying
            self._helpers = None
        return code

    def _remember_helpers(self) -> None:
        """Every process of the namespace but the command, as seen now (descriptions kept from earlier looks)."""
        if self._helpers is None:
            return
        found = procs.descendants(self.keeper_pid)
        if all(proc.pid != self.pid for proc in found):
            return  # the command is gone and the namespace going: keep the last look taken while it ran
        self._helpers = {
            proc.pid: self._helpers.get(proc.pid) or procs.describe(proc, "killed with its namespace")
            for proc in found if proc.pid != self.pid
        }

    def send_signal(self, sig: int) -> None:
        """Signal every process of the namespace (not its init, which would ignore it)."""
        self._stopped = True
        if self._proc.returncode is None and self.keeper_pid:
            for proc in procs.descendants(self.keeper_pid):
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)

    def kill(self) -> None:
        self._stopped = True
        super().kill()
        if self._helpers is not None:  # the kill named all it found; an earlier look may name processes gone since
            self._helpers.clear()

    def _cleanup(self) -> None:
        if self.connector is not None:
            self.connector.close()
        tmp = self._tmp_fd
        if tmp is not None:
            with contextlib.suppress(OSError):
                self.scratch_full = os.fstatvfs(tmp).f_bavail == 0
        if self.before_cleanup is not None:  # nothing of the sandbox runs any more: what it left can be read
            self.before_cleanup(Path(f"/proc/self/fd/{tmp}") if tmp is not None else self.scratch)
        if tmp is not None:
            os.close(tmp)  # the tmpfs goes with its last descriptor
            self._tmp_fd = None
        remove_scratch(self.scratch)


def _preexec(limit: int | None, tell_watchdog: Callable[[], None]) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def apply() -> None:  # between fork and exec of the outer bwrap
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        tell_watchdog()  # from here on the watchdog ends this sandbox once ds4ci is gone
        if os.getppid() != parent:  # ds4ci died before the death signal was armed: it never fires
            os.kill(os.getpid(), signal.SIGKILL)
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _executable(argv: Sequence[str], env: Mapping[str, str], cwd: Path | str | None) -> Path:
    """The command's executable, checked the way exec would (OSError like a failed exec or chdir)."""
    if cwd and not os.path.isdir(cwd):  # noqa: PTH112
        raise FileNotFoundError(2, os.strerror(2), str(cwd))
    name = argv[0]
    found = name if "/" in name else shutil.which(name, path=env.get("PATH", sandbox.DEFAULT_PATH))
    if found is None or not os.path.exists(found):  # noqa: PTH110
        raise FileNotFoundError(2, os.strerror(2), name)
    if os.path.isdir(found) or not os.access(found, os.X_OK):  # noqa: PTH112
        raise PermissionError(13, os.strerror(13), name)
    return Path(os.path.abspath(found))  # noqa: PTH100 - keep the links the command was named by


def spawn(
    argv: Sequence[str],
    policy: sandbox.Policy,
    view: sandbox.View,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdout: Output = None,
    stderr: Output = None,
    start_timeout: float | None = None,
    file_size_limit: int | None = None,
) -> SandboxChild:
    """Start ``argv`` under bwrap in ``view``; return once the command's process exists."""
    if not argv:
        raise ValueError("spawn needs a command, found an empty argv")
    given = dict(os.environ if env is None else env)
    exe = _executable(argv, given, cwd)
    view = dataclasses.replace(view, extra=(*view.extra, exe))
    scratch = watchdog.new_scratch()
    read_fd, write_fd = os.pipe()
    command: sandbox.Argv | None = None
    try:
        command = sandbox.argv(argv, policy, view, scratch=scratch, cwd=Path(cwd) if cwd else None, status_fd=write_fd)
        with contextlib.ExitStack() as stack:
            out, err = _open_output(stdout, stack), _open_output(stderr, stack)
            proc = _SPAWNER.submit(
                subprocess.Popen, list(command), env=sandbox.environment(given), stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, pass_fds=(write_fd, *command.fds), start_new_session=True, close_fds=True,
                preexec_fn=_preexec(file_size_limit, watchdog.outer_teller(scratch)),
            ).result()
    except BaseException:
        os.close(read_fd)
        remove_scratch(scratch)
        raise
    finally:
        os.close(write_fd)
        if command is not None:
            command.close()  # bwrap holds its own copies
    os.set_blocking(read_fd, False)
    child = SandboxChild(proc, read_fd, argv, scratch, view.own_network, sandbox.scratch_quota(view))
    await_or_sweep(child, child.await_command, start_timeout)
    return child
