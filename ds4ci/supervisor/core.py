"""The supervisor: containment mode, the per-process setup (subreaper, stale sweep), spawn and run."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci.records import Containment
from ds4ci.supervisor import procs, sandbox, sandboxed
from ds4ci.supervisor.child import (
    DEFAULT_KILL_WAIT_S,
    FALLBACK,
    NAMESPACE,
    Child,
    Output,
    StartTimeout,
    SupervisorError,
    Unkillable,
    spawn,
)
from ds4ci.supervisor.procs import KilledProcess

MODE_VARIABLE = "DS4CI_CONTAINMENT"
MODES = ("auto", "sandbox", "pid-namespace", "subreaper")
DEFAULT_GRACE_S = 5.0


@dataclass(frozen=True)
class RunResult:
    """How a short-lived command ended. ``returncode`` is None only if it was abandoned."""

    returncode: int | None
    timed_out: bool
    needed_kill: bool  # it was still running after SIGTERM + grace (only on a timeout)
    abandoned: bool  # it survived SIGKILL; a background thread keeps trying to reap it
    duration_s: float  # start to exit (or to the deadline)
    pid: int
    containment: str
    killed: tuple[KilledProcess, ...]


def _mode(requested: str | None) -> str:
    mode = requested if requested is not None else os.environ.get(MODE_VARIABLE, "").strip() or "auto"
    if mode not in MODES:
        source = "containment" if requested is not None else MODE_VARIABLE
        raise SupervisorError(f"{source} must be one of {', '.join(MODES)}; found {mode!r}")
    return mode


class Supervisor:
    """Starts commands with containment; one per ds4ci process is enough (see ``default()``).

    ``containment``: "auto" (a PID namespace where the kernel allows, else subreaper+sweep),
    "pid-namespace" (required: starting fails if refused) or "subreaper" (force the fallback).
    None reads ``DS4CI_CONTAINMENT`` at each start (default "auto"); anything else is an error.
    """

    def __init__(
        self, containment: str | None = None, *, sweep_stale: bool = True, policy: sandbox.Policy | None = None
    ) -> None:
        if containment is not None:
            _mode(containment)
        self._requested = containment
        self.policy = policy or sandbox.Policy()
        self._lock = threading.Lock()
        self._held: set[str] = set()  # levels of ds4ci's own commands (probes of system tools)
        self._held_pr: set[str] = set()  # levels of PR code (started with a view)
        self.subreaper = procs.become_subreaper()
        self.stale_killed: list[KilledProcess] = procs.sweep_stale() if sweep_stale else []

    @property
    def containment(self) -> Containment | None:
        """Which containment held for PR code so far (for every command when none ran PR code): the weakest
        one seen; None before any."""
        with self._lock:
            held = self._held_pr or self._held
            for level in (FALLBACK, NAMESPACE, sandbox.SANDBOX):
                if level in held:
                    return level
            return None

    def configure(self, policy: sandbox.Policy) -> None:
        """Use ``policy`` (``[sandbox]`` of the gate's config) for the commands started from now on."""
        self.policy = policy

    def sandbox_refusal(self) -> str | None:
        """Why PR code would not run sandboxed here (None: it would), by the policy and the host."""
        if not self.policy.enabled:
            return "the sandbox is turned off ([sandbox] enabled = false)"
        return sandbox.refusal()

    def sandboxes_pr_code(self) -> bool:
        """Would PR code started now run under bwrap (its own scratch folder as ``/tmp``)?"""
        try:
            return self._sandboxed(_mode(self._requested))
        except sandbox.SandboxUnavailable:
            return False

    def require_sandbox(self) -> None:
        """Raise ``SandboxUnavailable`` when the sandbox is required (policy or mode) and cannot run here."""
        self._sandboxed(_mode(self._requested))

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        stdout: Output = None,
        stderr: Output = None,
        start_timeout: float | None = None,
        file_size_limit: int | None = None,
        view: sandbox.View | None = None,
    ) -> Child:
        """Start ``argv`` and return once it has exec'd.

        ``view`` marks PR code: it runs under bubblewrap with the default view plus ``view``'s
        paths (``sandbox.py``) when the sandbox can run here; when it cannot, a required sandbox
        raises ``SandboxUnavailable`` and an optional one falls back to the keeper (PID namespace,
        or subreaper and sweep). Without ``view`` the command runs under the keeper.

        ``file_size_limit`` (bytes) caps every file the command and its descendants write
        (RLIMIT_FSIZE): a server flooding its log is stopped by the kernel, not by the disk.

        Raises OSError (FileNotFoundError, PermissionError, ...) when ``cwd`` or the executable
        is not usable, StartTimeout if it has not exec'd within ``start_timeout`` (it is killed),
        SupervisorError when containment cannot be set up as required.
        """
        mode = _mode(self._requested)
        boxed = view is not None and self._sandboxed(mode)
        try:
            if boxed:
                assert view is not None
                child: Child = sandboxed.spawn(
                    argv, sandbox.with_environment(self.policy), view, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                    start_timeout=start_timeout, file_size_limit=file_size_limit,
                )
            else:
                child = spawn(
                    argv, "auto" if mode == "sandbox" else mode, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                    start_timeout=start_timeout, file_size_limit=file_size_limit,
                )
        except StartTimeout as exc:
            self._record(exc.child, pr_code=view is not None)
            raise
        self._record(child, pr_code=view is not None)
        return child

    def _sandboxed(self, mode: str) -> bool:
        """Does PR code run under bwrap now? Raises ``SandboxUnavailable`` when it must and cannot."""
        why = self.sandbox_refusal() if mode in ("auto", "sandbox") else f"{MODE_VARIABLE}={mode} turns it off"
        if why is not None and (mode == "sandbox" or self.policy.require):
            source = f"{MODE_VARIABLE}=sandbox" if mode == "sandbox" else "[sandbox] require = true"
            raise sandbox.SandboxUnavailable(f"{source}, but {why}")
        return why is None

    def _record(self, child: Child, pr_code: bool) -> None:
        if child.containment:
            with self._lock:
                (self._held_pr if pr_code else self._held).add(child.containment)

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        stdout: Output = None,
        stderr: Output = None,
        grace_s: float = DEFAULT_GRACE_S,
        kill_wait_s: float = DEFAULT_KILL_WAIT_S,
        view: sandbox.View | None = None,
    ) -> RunResult:
        """Run a short-lived command to its end or ``timeout`` (then SIGTERM, SIGKILL after ``grace_s``).

        Always sweeps: when it returns, nothing the command started is left, or (``abandoned``)
        something survived SIGKILL and a daemon thread keeps trying. Start errors are raised as
        by ``spawn``; a start that hangs past ``timeout`` counts as a timeout.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, found {timeout}")
        started = time.monotonic()
        try:
            child = self.spawn(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, start_timeout=timeout, view=view)
        except StartTimeout as exc:
            late = exc.child
            return RunResult(None, True, True, False, time.monotonic() - started, late.pid, late.containment, tuple(late.killed))
        timed_out = needed_kill = False
        try:
            timed_out = child.wait(max(0.0, started + timeout - time.monotonic())) is None
            duration = time.monotonic() - started
            needed_kill = timed_out and child.terminate(grace_s, kill_wait_s)
            killed = child.sweep(kill_wait_s)
        except Unkillable:
            child.abandon()
            duration = time.monotonic() - started
            code = None if timed_out else child.returncode
            return RunResult(code, timed_out, True, True, duration, child.pid, child.containment, tuple(child.killed))
        except BaseException:
            try:
                child.sweep(kill_wait_s)
            except Unkillable:
                child.abandon()
            raise
        return RunResult(child.returncode, timed_out, needed_kill, False, duration, child.pid, child.containment, tuple(killed))


_default: Supervisor | None = None
_default_lock = threading.Lock()


def default() -> Supervisor:
    """The process-wide supervisor (created on first use: subreaper set, stale runs swept)."""
    global _default  # noqa: PLW0603 - one per process: the subreaper bit and the token owner are per process
    with _default_lock:
        if _default is None:
            _default = Supervisor()
        return _default
