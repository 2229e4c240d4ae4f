"""The keeper that runs one supervised command. Standard library only: it is run as a script.

``python -I -S shim.py REPORT_FD MODE PARENT_PID CWD -- ARGV...`` (started by ``ds4ci.supervisor``,
never imported). ``-I -S`` keep the command's environment (PYTHONPATH, PYTHONHOME, ...) away from
this interpreter; the environment it was given is what the command gets.

Processes, host view (``pid-namespace``)::

    ds4ci ── outer (this script) ── init (pid 1 of a new PID namespace) ── the command (pid 2) ── ...

- outer: parent-death signal SIGKILL (dies with the ds4ci *thread* that started it), then
  unshare(CLONE_NEWPID) (with CLONE_NEWUSER when unprivileged) and fork: the child is the
  namespace's init. It forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to init and exits
  once init is reaped; by then the kernel has emptied the namespace.
- init: parent-death signal SIGKILL (dies with outer; when the init of a PID namespace dies the
  kernel SIGKILLs every process in it), own mount namespace with a fresh /proc (best effort, so
  the command sees pids that agree with kill(2)), forwards signals to every process of the
  namespace (``kill(-1)``), reaps every orphan, reports the command's exit status and exits once
  the command is gone and it has no child left.
- ``subreaper+sweep`` (no namespace, or forced): outer is the keeper itself, a child subreaper,
  so every orphan of the command is re-parented to it and stays in its process tree; signals go
  to the command's process group; the command gets a parent-death signal too.

The command runs in its own process group. Lines written to REPORT_FD (each under PIPE_BUF, so
writes from the three processes never interleave)::

    mode pid-namespace|subreaper+sweep    note TEXT    keeper HOSTPID    pid HOSTPID
    started    error STAGE ERRNO TEXT    exit CODE   (CODE as Popen.returncode: -N = signal N)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from collections.abc import Callable

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 2, 4, 8, 16384, 1 << 19
NAMESPACE, FALLBACK = "pid-namespace", "subreaper+sweep"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
WAITED = {*FORWARDED, signal.SIGCHLD}
EXEC_FAILED = 127

_libc = ctypes.CDLL(None, use_errno=True)


def _call(what: str, result: int) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _report(fd: int, *words: object) -> None:
    line = " ".join(str(w) for w in words).replace("\n", " ")[:480] + "\n"
    with contextlib.suppress(OSError):  # ds4ci is gone; its death signal is on its way
        os.write(fd, line.encode("utf-8", errors="replace"))


def _die_with_parent() -> None:
    _call("prctl(PR_SET_PDEATHSIG)", _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))


def _unshare_pid() -> str:
    """Enter a new PID namespace for our children; return a note ('' when plain root)."""
    try:
        _call("unshare(CLONE_NEWPID)", _libc.unshare(CLONE_NEWPID))
        return ""
    except OSError:
        if os.geteuid() == 0:
            raise
    uid, gid = os.geteuid(), os.getegid()
    _call("unshare(CLONE_NEWUSER|CLONE_NEWPID)", _libc.unshare(CLONE_NEWUSER | CLONE_NEWPID))
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as fh:  # noqa: PTH123 - stdlib only
            fh.write(text)
    return "unprivileged: inside a user namespace that maps only the own uid and gid"


def _own_mount_namespace() -> str:
    """A private mount namespace for init (mounts still propagate in from the host); '' or a note."""
    try:
        _call("unshare(CLONE_NEWNS)", _libc.unshare(CLONE_NEWNS))
        _call("mount --make-rslave /", _libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None))
    except OSError as exc:
        return f"no private /proc ({exc.strerror}); the command sees host pids in /proc"
    return ""


def _mount_proc() -> str:
    try:
        _call("mount proc", _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None))
    except OSError as exc:
        return f"no private /proc ({exc.strerror}); the command sees host pids in /proc"
    return ""


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    return data


def _start_command(report: int, argv: list[str], cwd: str, in_namespace: bool, private_proc: bool) -> int:
    """Fork the command (own process group), report its host pid, exec it; return its pid here."""
    sync_r, sync_w = os.pipe()  # command -> keeper: 'R' (host pid read), then errors; EOF = exec'd
    go_r, go_w = os.pipe()  # keeper -> command: /proc is ready
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        stage = "setup"
        try:
            os.close(sync_r)
            os.close(go_w)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)  # Python ignores these; exec would keep that
            os.setpgid(0, 0)
            if not in_namespace:
                _die_with_parent()
                if os.getppid() != keeper:
                    os._exit(EXEC_FAILED)
            # /proc still belongs to the host here, so /proc/self names the host pid.
            host_pid = int(os.readlink("/proc/self")) if in_namespace else os.getpid()  # noqa: PTH115
            _report(report, "pid", host_pid)
            os.write(sync_w, b"R")
            os.read(go_r, 1)
            if cwd:
                stage = "chdir"
                os.chdir(cwd)
            stage = "exec"
            os.execvp(argv[0], argv)  # noqa: S606 - the command ds4ci was asked to run
        except OSError as exc:
            text = f"E {stage} {exc.errno or 0} {exc.strerror or exc}"
            os.write(sync_w, text.encode("utf-8", errors="replace")[:400])
        finally:
            os._exit(EXEC_FAILED)
    os.close(sync_w)
    os.close(go_r)
    ready = os.read(sync_r, 1)
    if ready == b"R" and in_namespace and private_proc:
        note = _mount_proc()
        if note:
            _report(report, "note", note)
    os.write(go_w, b"G")
    os.close(go_w)
    failure = (ready if ready != b"R" else b"") + _read_all(sync_r)
    os.close(sync_r)
    if failure.startswith(b"E "):
        _, stage, errno_text, text = [*failure.decode("utf-8", errors="replace").split(" ", 3), "", "", ""][:4]
        _report(report, "error", stage, errno_text, text)
    elif failure or not ready:
        _report(report, "error", "setup", 0, "the command's process died before exec")
    else:
        _report(report, "started")
    return pid


def _keep(report: int, command: int, forward: Callable[[int, bool], None]) -> None:
    """Reap every child, forward signals, report the command's status; return when nothing is left."""
    done = False
    while True:
        info = signal.sigwaitinfo(WAITED)
        if info.si_signo != signal.SIGCHLD:
            forward(info.si_signo, done)
            continue
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            if pid == command:
                done = True
                _report(report, "exit", os.waitstatus_to_exitcode(status))


def _run_init(report: int, lifeline: int, argv: list[str], cwd: str) -> None:
    _die_with_parent()
    if select.select([lifeline], [], [], 0)[0]:
        os._exit(1)  # outer died before our death signal was armed
    note = _own_mount_namespace()
    if note:
        _report(report, "note", note)
    command = _start_command(report, argv, cwd, in_namespace=True, private_proc=not note)

    def forward(sig: int, _done: bool) -> None:
        with contextlib.suppress(OSError):
            os.kill(-1, sig)  # from a namespace's init: every process in it but init

    _keep(report, command, forward)


def _outer_namespace(report: int, argv: list[str], cwd: str) -> None:
    lifeline_r, lifeline_w = os.pipe()
    init = os.fork()
    if init == 0:
        try:
            os.close(lifeline_w)
            _run_init(report, lifeline_r, argv, cwd)
        finally:
            os._exit(0)
    os.close(lifeline_r)
    _report(report, "keeper", init)
    os.close(report)
    while True:
        info = signal.sigwaitinfo(WAITED)
        if info.si_signo == signal.SIGCHLD:
            pid, _ = os.waitpid(init, os.WNOHANG)
            if pid == init:
                os._exit(0)
        else:
            os.kill(init, info.si_signo)  # init is not reaped yet, so its pid is still its own


def _keeper_fallback(report: int, argv: list[str], cwd: str) -> None:
    _call("prctl(PR_SET_CHILD_SUBREAPER)", _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
    _report(report, "keeper", os.getpid())
    command = _start_command(report, argv, cwd, in_namespace=False, private_proc=False)

    def forward(sig: int, done: bool) -> None:
        if not done:  # once reaped, the command's pgid may be reused; the sweep kills the rest
            with contextlib.suppress(OSError):
                os.killpg(command, sig)

    _keep(report, command, forward)


def main(args: list[str]) -> int:
    if len(args) < 6 or args[4] != "--" or args[1] not in ("auto", "pid-namespace", "subreaper"):
        print("usage: shim.py REPORT_FD auto|pid-namespace|subreaper PARENT_PID CWD -- ARGV...", file=sys.stderr)
        return 2
    report, mode, parent, cwd, argv = int(args[0]), args[1], int(args[2]), args[3], args[5:]
    os.set_inheritable(report, False)  # the command must never hold it after exec
    _die_with_parent()
    if os.getppid() != parent:
        return 1  # ds4ci died before our death signal was armed
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)  # handled synchronously by sigwaitinfo
    if mode == "subreaper":
        _report(report, "mode", FALLBACK)
        _report(report, "note", "forced by configuration")
        _keeper_fallback(report, argv, cwd)
        return 0
    try:
        note = _unshare_pid()
    except OSError as exc:
        if mode == "pid-namespace":
            _report(report, "error", "unshare", exc.errno or 0, exc.strerror or exc)
            return 3
        _report(report, "mode", FALLBACK)
        _report(report, "note", f"the kernel refused a PID namespace ({exc.strerror})")
        _keeper_fallback(report, argv, cwd)
        return 0
    _report(report, "mode", NAMESPACE)
    if note:
        _report(report, "note", note)
    _outer_namespace(report, argv, cwd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
