"""Finding, killing and reaping processes with psutil: tracking tokens, trees, stale runs, listeners."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

TOKEN_VARIABLE = "DS4CI_RUN_TOKEN"  # noqa: S105 - a variable name, not a secret
_TOKEN_PREFIX = "v1"  # noqa: S105
_PR_SET_CHILD_SUBREAPER = 36
_CMDLINE_LIMIT = 300
_FREEZE_PASSES = 1000  # a pass finds what forked since the last one; each pass freezes more of a finite tree
_SETTLE_S = 2.0  # how long a scan looks again at a process caught in exec before it gives up on telling its token
_PF_EXITING, _PF_KTHREAD = 0x4, 0x00200000  # /proc/PID/stat flags: no memory of its own to read an environment from
# Addresses whose listener also accepts connections to 127.0.0.1.
_COVERS_LOOPBACK = frozenset({"127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0"})


@dataclass(frozen=True)
class KilledProcess:
    """One process a sweep killed: host pid, name, command line (clipped) and why it was a target."""

    pid: int
    name: str
    cmdline: str
    reason: str  # "descendant" | "token" | "stale run"

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.cmdline or self.name}; {self.reason})"


@dataclass(frozen=True)
class Listeners:
    """Who listens on a TCP port reachable at 127.0.0.1: host pids, and sockets whose owner is unknown."""

    pids: frozenset[int]
    unidentified: int


def become_subreaper() -> bool:
    """Make this process a child subreaper (orphans below it are re-parented to it); False if refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _start_stamp(proc: psutil.Process) -> str:
    return f"{proc.create_time():.2f}"


def _pid_namespace() -> str:
    """This process's PID namespace (pids in a token only mean something there)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)  # noqa: PTH116 - one stat, not /proc parsing
    except OSError:
        return "unknown"


def new_token() -> str:
    """``v1:<pid namespace>:<owner pid>:<owner start time>:<random>``, unique per child.

    It names the ds4ci process that owns the child, so a later ds4ci can tell leftovers of a
    killed run (owner gone) from processes of a run still going.
    """
    me = psutil.Process()
    return f"{_TOKEN_PREFIX}:{_pid_namespace()}:{me.pid}:{_start_stamp(me)}:{secrets.token_hex(12)}"


def _owner_alive(token: str) -> bool:
    """Is the ds4ci named in a token still running? When that cannot be told (a token from another
    PID namespace, whose pids mean other processes here, or one not made by us), assume it is."""
    parts = token.split(":")
    if len(parts) != 5 or parts[0] != _TOKEN_PREFIX or parts[1] != _pid_namespace() or not parts[2].isdigit():
        return True
    try:
        return _start_stamp(psutil.Process(int(parts[2]))) == parts[3]
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def describe(proc: psutil.Process, reason: str) -> KilledProcess:
    name, cmdline = "?", ""
    with contextlib.suppress(psutil.Error):
        name = proc.name()
    with contextlib.suppress(psutil.Error):
        cmdline = " ".join(proc.cmdline())
    if len(cmdline) > _CMDLINE_LIMIT:
        cmdline = cmdline[: _CMDLINE_LIMIT - 1] + "…"
    return KilledProcess(proc.pid, name, cmdline, reason)


def _in_exec(pid: int) -> bool:
    """Is ``pid`` inside exec, its new program's memory in place but not yet its environment (which reads empty)?

    The kernel sets the environment's end (/proc/PID/stat field 51) last; it is 0 until then, and 0 in a process
    without memory of its own (a kernel thread, one exiting), told apart by its flags (field 9).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:  # noqa: PTH123 - one pseudo-file that psutil does not parse this far
            fields = fh.read().rsplit(b")", 1)[1].split()  # fields[0] is field 3: the name before may hold anything
    except (OSError, IndexError):
        return False
    if len(fields) < 51 - 2:  # a kernel older than 3.5 does not say: the environment read is all there is
        return False
    return not int(fields[9 - 3]) & (_PF_EXITING | _PF_KTHREAD) and int(fields[51 - 3]) == 0


def _token_of(proc: psutil.Process) -> tuple[str | None, bool]:
    """Its token (None: none, or the process is gone, a zombie or another user's), and whether that could be told:
    not while exec has yet to put the new program's environment in place."""
    try:
        environ = proc.environ()
        if not environ:
            if _in_exec(proc.pid):
                return None, False
            environ = proc.environ()  # exec may have ended between the two reads; else it is really empty
        return environ.get(TOKEN_VARIABLE), True
    except psutil.Error:  # gone, a zombie, or another user's process
        return None, True


def _carrying(wanted: Callable[[psutil.Process, str | None], bool]) -> list[psutil.Process]:
    """Live processes whose token ``wanted`` accepts. One caught inside exec is looked at again until its
    environment can be read (up to ``_SETTLE_S``): read then, it would be passed over as tokenless."""
    found: list[psutil.Process] = []
    pending, deadline = list(psutil.process_iter()), None
    while True:
        still = []
        for proc in pending:
            token, told = _token_of(proc)
            if not told:
                still.append(proc)
            elif wanted(proc, token):
                found.append(proc)
        pending = still
        deadline = deadline if deadline is not None else time.monotonic() + _SETTLE_S  # counted from the first look
        if not pending or time.monotonic() >= deadline:
            return found
        time.sleep(0.001)


def token_holders(token: str, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Live processes whose environment carries ``DS4CI_RUN_TOKEN=token``."""
    skip = {os.getpid(), *exclude}
    return _carrying(lambda proc, carried: proc.pid not in skip and carried == token)


def stale_holders() -> list[psutil.Process]:
    """Live processes carrying a token whose ds4ci owner no longer runs (left by a killed ds4ci).

    Our own token (ds4ci run under another ds4ci) is left alone: it marks our siblings, and the
    direct children we started without the supervisor, which are not ours to kill or reap.
    """
    own, me = os.environ.get(TOKEN_VARIABLE), os.getpid()
    return _carrying(
        lambda proc, token: token is not None and token != own and proc.pid != me and not _owner_alive(token)
    )


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (empty when it is gone)."""
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if _running(p)]
    except psutil.Error:
        return []


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_descendant(pid: int, ancestor: int) -> bool:
    try:
        return any(parent.pid == ancestor for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def kill_all(targets: Iterable[tuple[psutil.Process, str]], seen: set[int]) -> list[KilledProcess]:
    """SIGKILL each target (psutil refuses a pid that was reused); describe those not killed before.

    The targets are frozen (``freeze``): all are described first, then killed, because the kill of one can take
    others down before their turn (a sandbox's init ends with its command, and the kernel empties its namespace).
    One gone by its turn was killed that way: a stopped process cannot exit by itself.
    """
    described = [(proc, describe(proc, reason)) for proc, reason in targets if proc.pid not in seen and _running(proc)]
    killed = []
    for proc, record in described:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass  # gone since it was described: a kill before its own took it down
        except psutil.Error:
            continue
        seen.add(proc.pid)
        killed.append(record)
    return killed


def freeze(find: Callable[[], Iterable[psutil.Process]], frozen: dict[int, psutil.Process]) -> None:
    """SIGSTOP every process ``find`` returns, pass after pass, until a pass finds nothing new.

    A stopped process cannot fork, so once a pass finds nothing new every target is frozen: none can
    start another while they are killed (a kill of one list would race a process still forking).
    """
    for _ in range(_FREEZE_PASSES):
        new = [p for p in find() if p.pid not in frozen]
        if not new:
            return
        for proc in new:
            with contextlib.suppress(psutil.Error):  # gone, or its pid reused (psutil refuses it)
                proc.suspend()
            frozen[proc.pid] = proc


def freeze_and_kill(
    find: Callable[[], Iterable[psutil.Process]], reason: str, seen: set[int]
) -> list[KilledProcess]:
    """Freeze everything ``find`` returns (``freeze``), then SIGKILL it all; describe those not killed before."""
    frozen: dict[int, psutil.Process] = {}
    freeze(find, frozen)
    return kill_all(((p, reason) for p in frozen.values()), seen)


def is_others_zombie(pid: int) -> bool:
    """``pid`` has exited and is still another process's zombie (not yet handed to us, a subreaper)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() != os.getpid()
    except psutil.Error:
        return False


def reap_adopted(pids: Iterable[int], wait_s: float = 2.0) -> None:
    """Reap killed processes that were re-parented to us (we are a subreaper); never anyone else's child."""
    me = os.getpid()
    pending = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).ppid() == me:
                pending.add(pid)
    deadline = time.monotonic() + wait_s
    while pending:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                pending.discard(pid)
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def sweep_stale() -> list[KilledProcess]:
    """Kill and reap what an earlier, killed ds4ci left behind (found by its tracking token): frozen first, then
    killed, repeated until a pass finds nothing new."""
    seen: set[int] = set()
    killed: list[KilledProcess] = []
    while found := freeze_and_kill(stale_holders, "stale run", seen):  # again until a pass finds nothing new
        killed += found
        with contextlib.suppress(psutil.Error):
            psutil.wait_procs([psutil.Process(k.pid) for k in found if psutil.pid_exists(k.pid)], timeout=2.0)
        reap_adopted(k.pid for k in found)
    return killed


def tcp_listeners(port: int) -> Listeners:
    """Processes listening on ``port`` at an address that 127.0.0.1 reaches (IPv4 and IPv6 tables)."""
    pids: set[int] = set()
    unidentified = 0
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip not in _COVERS_LOOPBACK:
            continue
        if conn.pid is None:
            unidentified += 1
        else:
            pids.add(conn.pid)
    return Listeners(frozenset(pids), unidentified)
