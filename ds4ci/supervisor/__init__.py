"""Process supervision with containment: nothing a command starts outlives ds4ci's use of it.

Why: the gate runs pull-request code (the server it builds, checks, builds) as the same user as
ds4ci. Such code can fork helpers, or double-fork a ``setsid`` daemon that leaves its process
group and session. The supervisor makes sure all of it is found, killed and reaped.

Containment, per command (``Child.containment``; ``Supervisor.containment`` is the weakest that
held so far for PR code, the string the gate records in results.json):

``sandbox``
    PR code (a ``spawn``/``run`` given a ``view``) runs under bubblewrap where it works here
    (``sandbox.py``: the allowlist view, fresh /proc and /dev, new PID/IPC/UTS namespaces, no
    capabilities, an environment without credentials, a scratch /tmp per process). bwrap is the
    namespace's init, so no Python keeper starts (``sandboxed.py``). ``Policy.require`` (or
    ``DS4CI_CONTAINMENT=sandbox``) makes a host without a working bwrap an error
    (``SandboxUnavailable``) instead of a fallback to the levels below.
``pid-namespace``
    The command runs as pid 2 of a new PID namespace whose init is a small keeper (``shim.py``):
    ds4ci -> outer -> init (ns pid 1) -> command. Outer and init carry a parent-death signal
    (SIGKILL), so ``kill -9`` of ds4ci kills outer, then init, and when the init of a PID
    namespace dies the kernel SIGKILLs every process in it, whatever its session or group:
    nothing survives, within milliseconds. init reaps orphans and forwards signals to the whole
    namespace. Where the kernel allows, init also gets its own mount namespace with a fresh
    /proc, so the command sees pids that agree with kill(2) (else a ``note`` says so). As root
    this needs nothing else; an unprivileged user gets it through a user namespace that maps
    only its own uid/gid (files it writes keep their owner; setuid programs such as sudo do not
    work inside). Start-up cost: one extra Python interpreter start (bench/bench_supervisor.py).
``subreaper+sweep``
    The fallback when the kernel refuses namespaces, or forced with ``Supervisor("subreaper")``
    or ``DS4CI_CONTAINMENT=subreaper``. The keeper is a child subreaper, so every orphan of
    the command is re-parented to it and stays in its process tree; the command gets a
    parent-death signal. Limit: if ds4ci itself is SIGKILLed, the keeper and the command die,
    but a daemon the command double-forked survives; it still carries the tracking token, and
    the next ds4ci start kills it (``Supervisor()`` runs ``sweep_stale()``).

In both modes ds4ci makes itself a child subreaper too, and every command's environment carries
``DS4CI_RUN_TOKEN=v1:<pid ns>:<ds4ci pid>:<ds4ci start time>:<random>`` (unique per command), so what
leaves the tree can still be found (psutil reads each process's initial environment). Trust
limit: this contains accidents and ordinary daemons, not code that sets out to escape (it can
exec with an empty environment, or, as root, reach the host through /proc or other services);
human review of the pull request covers that.

API (Linux only; see each docstring)::

    sup = default()                          # or Supervisor(containment=None|"auto"|"sandbox"|"pid-namespace"|"subreaper")
    sup.configure(Policy(require=..., ro_paths=..., rw_paths=..., devices=..., hidden=..., frozen=...))
    child = sup.spawn(argv, env=..., cwd=..., stdout=Path|file|fd|None, stderr=...|STDOUT, view=View(ro=..., rw=...))
    child.pid          # the command's host pid (for logs); child.keeper_pid, child.token, child.notes
    child.poll()       # exit status like Popen.returncode (-N: signal N), or None while it runs
    child.wait(t)      # the status, or None if still running after t seconds
    child.terminate(grace_s)  # SIGTERM to namespace/group, SIGKILL after grace; True if the kill was needed
    child.owns(pid)    # host pid is the command, its descendant (its namespace), or carries its token
    child.sweep()      # always call at the end (or use ``with child:``): kills and reaps all that is left,
                       # returns [KilledProcess] (also in child.killed)
    sup.run(argv, timeout, ...) -> RunResult  # short-lived commands: deadline, SIGTERM/SIGKILL, always sweeps
    tcp_listeners(port) -> Listeners(pids, unidentified)  # who listens where 127.0.0.1 reaches the port

A long-running server: ``spawn`` it, poll ``/health``, check ``tcp_listeners(port).pids`` are all
``child.owns(...)`` (and ``unidentified == 0``), at the end ``terminate(stop_timeout)`` then
``sweep()`` in a ``finally``. ``terminate``/``sweep`` raise ``Unkillable`` if something survives
SIGKILL (uninterruptible sleep). Any thread may spawn: keepers are started from one long-lived
thread, because a parent-death signal fires when the *thread* that forked the child ends.
"""

from ds4ci.supervisor.child import FALLBACK, NAMESPACE, STDOUT, Child, StartTimeout, SupervisorError, Unkillable
from ds4ci.supervisor.core import MODE_VARIABLE, MODES, RunResult, Supervisor, default
from ds4ci.supervisor.procs import TOKEN_VARIABLE, KilledProcess, Listeners, sweep_stale, tcp_listeners
from ds4ci.supervisor.sandbox import SANDBOX, Policy, SandboxUnavailable, View

__all__ = [
    "FALLBACK",
    "MODES",
    "MODE_VARIABLE",
    "NAMESPACE",
    "SANDBOX",
    "STDOUT",
    "TOKEN_VARIABLE",
    "Child",
    "KilledProcess",
    "Listeners",
    "Policy",
    "RunResult",
    "SandboxUnavailable",
    "StartTimeout",
    "Supervisor",
    "SupervisorError",
    "Unkillable",
    "View",
    "default",
    "sweep_stale",
    "tcp_listeners",
]
