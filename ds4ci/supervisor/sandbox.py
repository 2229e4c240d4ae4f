"""The bubblewrap sandbox: its policy, whether the kernel allows it, the argv and the environment.

Every process that runs pull-request code (the server, ``[build]``, ``[[checks]]``, probes of a
PR-built binary) runs as ``bwrap ... -- COMMAND`` with an allowlist view of the file system:

- read-only: ``/usr``, the ``/lib*``, ``/bin`` and ``/sbin`` folders (or their links into
  ``/usr``), the parts of ``/etc`` programs need (:data:`ETC_FILES`), toolchains
  (``/opt/rocm*``; ``/usr/local/cuda`` sits under ``/usr``), ``/sys``, the paths the caller names
  (server binary, model files, the checkout) and ``[sandbox] ro_paths``;
- writable: a fresh scratch folder per process, mounted as ``/tmp`` and named by ``HOME`` and
  ``TMPDIR`` (for a view with ``scratch_bytes``, the server's: a tmpfs of that size instead, private to
  the sandbox, so a server cannot write more than that there; bubblewrap >= 0.7 for ``--size``);
  the paths the caller names (the build's own folder) and ``[sandbox] rw_paths``;
- devices: a fresh ``/dev`` with the standard nodes, plus :data:`DEFAULT_DEVICES` (GPU nodes,
  where present) and ``[sandbox] devices``; ``/dev`` itself read-only (no file can be written there) and
  ``/dev/shm`` a tmpfs of its own, of the scratch quota's size where the view has one;
- a fresh ``/proc`` of a new PID namespace (IPC and UTS are new too), ``--die-with-parent``,
  ``--new-session``, every capability dropped; unprivileged users get a user namespace that maps
  only their own uid;
- everything else is absent: ``$HOME``, the runner's install and credentials, ds4ci's install
  and keys, the evidence folder, other workspaces.

Every path the caller or the policy names is opened once, by the one resolver (``resolve.py``): beneath the
view's trees (the checkout and every folder pull-request code may write) with no link followed, a link anywhere
on the way refused; outside them at its resolved place. The sandbox binds the open descriptor
(``--bind-fd`` / ``--ro-bind-fd``), never the path again, at the place the descriptor lies (:func:`checked_binds`).
A bind is refused (:class:`BindRefused`, the message names the rule) when it lies at ``/`` or ``/tmp``, or at or
inside ``/proc``, ``/dev``, ``/sys`` or ``/run`` (the sandbox's own); when it would show a home-like folder whole
(``$HOME``, the runner's install, its temp folder); when it lies inside a self-hosted runner's install but not
inside its ``_work`` folder; when it lies inside a hidden folder (the evidence, a key folder); and when it is
writable and lies inside ds4ci's own install. Hidden folders inside a shown one are covered by an empty tmpfs,
ds4ci's install is bound read-only again.

The network: a process whose view asks for it (``View.own_network``: the server) gets a network namespace
of its own (``--unshare-net``: a loopback interface and nothing else), so it reaches no host service,
neither over loopback TCP nor through an abstract Unix socket (those are scoped by network namespace);
ds4ci reaches it through sockets made inside that namespace (``netns.py``). The build and the checks
share the runner's network (a build may fetch what it needs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ds4ci.options.policy import PROVENANCE_PREFIXES
from ds4ci.supervisor import resolve
from ds4ci.supervisor.child import SupervisorError
from ds4ci.supervisor.cpuonline import bind as cpu_online_bind

SANDBOX: Final = "sandbox"
INSTALL_HINT = "install it: sudo apt-get install bubblewrap (Debian/Ubuntu; Fedora: sudo dnf install bubblewrap)"
KERNEL_HINT = (
    "check the kernel allows user namespaces: sysctl kernel.unprivileged_userns_clone (must be 1 where it "
    "exists), user.max_user_namespaces (must be > 0), kernel.apparmor_restrict_unprivileged_userns (0, or an "
    "AppArmor profile for bwrap)"
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/nsswitch.conf", "/etc/passwd",
    "/etc/group", "/etc/services", "/etc/protocols", "/etc/localtime", "/etc/os-release", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/alternatives",
    "/etc/OpenCL", "/etc/vulkan",
)
TOOLCHAINS = ("/opt/rocm*", "/opt/amdgpu*", "/opt/nvidia*")
DEFAULT_DEVICES = (
    "/dev/kfd", "/dev/dri", "/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset", "/dev/nvidia-caps",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSIDE_TMP = "/tmp"  # noqa: S108 - inside the sandbox: the per-process scratch folder
# Names that never reach sandboxed code, whatever their value: credentials of any name and the
# variables of ds4ci, the runner and GitHub (a job's tokens, its runtime URLs, the runner's paths).
_SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|PRIVATE|SESSION|CERT_PASS", re.IGNORECASE)
_DROPPED_PREFIXES = ("DS4CI", "GITHUB_", "GH_", "ACTIONS_", "RUNNER_", "INPUT_", "SSH_", "XDG_", "AWS_", "AZURE_")
_SERVER_FAMILIES = (*PROVENANCE_PREFIXES, "DS4SIM_")
_DROPPED_NAMES = frozenset({"HOME", "TMPDIR", "TMP", "TEMP", "PWD", "OLDPWD", "MAIL", "USER_CREDENTIALS", "CI_JOB_JWT"})


class SandboxUnavailable(SupervisorError):
    """bwrap is missing or the kernel refuses it while the sandbox is required (the message says what to do)."""


@dataclass(frozen=True)
class Policy:
    """``[sandbox]``: whether PR code must run sandboxed, and what a runner adds to the default view."""

    require: bool = False
    ro_paths: tuple[Path, ...] = ()
    rw_paths: tuple[Path, ...] = ()
    devices: tuple[str, ...] = ()  # globs, added to DEFAULT_DEVICES
    enabled: bool = True  # False: never sandbox (the PID namespace or subreaper levels only)
    hidden: tuple[Path, ...] = ()  # covered by an empty read-only tmpfs where a bound path would show them (evidence, keys)
    frozen: tuple[Path, ...] = ()  # bound read-only again where a bound path would show them (ds4ci's install)
    homes: tuple[Path, ...] = ()  # never shown whole: a bind may lie inside one, never be or hold one ($HOME, the runner's)
    installs: tuple[Path, ...] = ()  # self-hosted runners' installs: nothing inside one is shown but its _work folder


RO_VARIABLE, RW_VARIABLE = "DS4CI_SANDBOX_RO_PATHS", "DS4CI_SANDBOX_RW_PATHS"


def environment_paths(variable: str) -> tuple[Path, ...]:
    """Extra paths a harness (the test suite) names in ``variable``, separated by ``os.pathsep``."""
    return tuple(Path(p) for p in os.environ.get(variable, "").split(os.pathsep) if p)


def python_runtime() -> tuple[Path, ...]:
    """This interpreter and ds4ci's import root: what a server written in ds4ci's own Python (the
    simulator, the reference server of ``selftest``) needs to see, read-only. Never shown to a real server."""
    import ds4ci

    found = (Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent.parent,
             Path(ds4ci.__file__).resolve().parent.parent)
    return tuple(dict.fromkeys(found))


def runtime_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus ``DS4CI_SANDBOX_RO_PATHS`` naming :func:`python_runtime` (for a gate that runs ds4ci's own servers)."""
    shown = [p for p in env.get(RO_VARIABLE, "").split(os.pathsep) if p] + [str(p) for p in python_runtime()]
    return {**env, RO_VARIABLE: os.pathsep.join(dict.fromkeys(shown))}


def with_environment(policy: Policy) -> Policy:
    """``policy`` plus the paths of ``DS4CI_SANDBOX_RO_PATHS`` / ``DS4CI_SANDBOX_RW_PATHS`` (a test harness's)."""
    return dataclasses.replace(
        policy, ro_paths=(*policy.ro_paths, *environment_paths(RO_VARIABLE)),
        rw_paths=(*policy.rw_paths, *environment_paths(RW_VARIABLE)),
    )


@dataclass(frozen=True)
class View:
    """What one process needs beyond the default view: paths read-only and writable (absolute)."""

    ro: tuple[Path, ...] = ()
    rw: tuple[Path, ...] = ()
    extra: tuple[Path, ...] = field(default=())  # read-only, but only where they exist (optional files)
    trees: tuple[Path, ...] = ()  # the checkout and every PR-writable folder: what is named inside them is opened
    # beneath them, no link followed (resolve.py)
    own_network: bool = False  # a network namespace of its own (the server): no host service in reach
    scratch_bytes: int | None = None  # /tmp a tmpfs of this size (the server's quota); None: the scratch folder
    cpu_online: bool = False  # /sys/devices/system/cpu/online shows only the CPUs of the caller's affinity


class BindRefused(SupervisorError):
    """A path the sandbox was asked to show that the bind rules refuse; the message names the path and the rule."""


FRESH: Final = ("/proc", "/dev", "/sys", "/run")  # the sandbox's own: never bound over, nor anything inside them


def real(path: Path) -> Path:
    """``path`` made absolute with every link and ``..`` resolved (for a trusted path outside the PR's folders)."""
    return Path(os.path.realpath(path))


plain = resolve.plain


def _within(path: Path, folders: Iterable[Path]) -> Path | None:
    return next((f for f in folders if path.is_relative_to(f)), None)


def _refusal(named: Path, resolved: Path, writable: bool, policy: Policy) -> str | None:
    shown = str(named) + (f" (resolves to {resolved})" if resolved != named else "")
    if str(resolved) in ("/", INSIDE_TMP) or _within(resolved, map(Path, FRESH)) is not None:
        return f"{shown}: /, /tmp, /proc, /dev, /sys and /run are the sandbox's own and are never bound over"
    for home in map(real, policy.homes):
        if home.is_relative_to(resolved):
            return (f"{shown} would show {home} whole (the home folder, or the runner's install or temp folder); "
                    "name the folder inside it that the process needs")
    for install in map(real, policy.installs):
        if resolved.is_relative_to(install) and not resolved.is_relative_to(install / "_work"):
            return (f"{shown} lies inside {install}, a self-hosted runner's install (its programs and credentials): "
                    "nothing in it but its _work folder is ever shown to pull-request code")
    inside = _within(resolved, map(real, policy.hidden))
    if inside is not None:
        return f"{shown} lies inside {inside}, which pull-request code never sees (the evidence or a key folder)"
    frozen = _within(resolved, map(real, policy.frozen)) if writable else None
    if frozen is not None:
        return f"{shown} lies inside {frozen}, ds4ci's own install, which pull-request code never writes"
    return None


@dataclass(frozen=True)
class Bind:
    """One bind of a view: ``opened`` (a descriptor the resolver opened) shown at ``at``, read-only or writable."""

    writable: bool
    opened: resolve.Opened
    at: Path  # where the descriptor lies: the place it is shown at inside the sandbox

    @property
    def option(self) -> str:
        return "--bind-fd" if self.writable else "--ro-bind-fd"


def checked_binds(policy: Policy, view: View) -> list[Bind]:
    """Every bind of ``view`` and ``policy``, each path opened once by the resolver, parents first (a bind that
    its parent already shows the same way is left out, its descriptor closed); BindRefused when one breaks a rule
    (see the module's text). The caller closes the descriptors (:func:`close_binds`)."""
    asked = [(False, p, False) for p in (*view.ro, *policy.ro_paths)]
    asked += [(False, p, True) for p in view.extra]
    asked += [(True, p, False) for p in (*view.rw, *policy.rw_paths)]
    binds: list[Bind] = []
    try:
        for writable, path, optional in asked:
            try:
                opened = resolve.open_path("a sandbox bind", path, view.trees, missing_ok=optional)
            except resolve.PathRefused as exc:
                raise BindRefused(f"sandbox: refused to bind {exc}") from exc
            if opened is None:
                continue
            binds.append(Bind(writable, opened, opened.real))
            why = _refusal(opened.named, binds[-1].at, writable, policy)
            if why is not None:
                raise BindRefused(f"sandbox: refused to bind {why}")
    except BaseException:
        close_binds(binds)
        raise
    binds.sort(key=lambda b: (_depth(str(b.at)), b.writable, str(b.at)))  # parents first, then children
    kept: list[Bind] = []
    for bind in binds:
        parent = max((k for k in kept if bind.at.is_relative_to(k.at)), key=lambda k: _depth(str(k.at)), default=None)
        if parent is not None and parent.writable == bind.writable and parent.opened.is_dir():
            bind.opened.close()  # shown already, the same way, through its parent
        else:
            kept.append(bind)
    return kept


def close_binds(binds: Iterable[Bind]) -> None:
    for bind in binds:
        bind.opened.close()


class Argv(list[str]):
    """bwrap's command line and the descriptors its ``--bind-fd`` options name: pass them to the process
    (``pass_fds``), then :meth:`close` them."""

    def __init__(self, args: Iterable[str] = (), fds: Sequence[int] = ()) -> None:
        super().__init__(args)
        self.fds = tuple(fds)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def refusal() -> str | None:
    """None when bwrap runs here with the options ds4ci uses; else why not, and what to do (cached)."""
    path = bwrap_path()
    if path is None:
        return f"bubblewrap (bwrap) is not installed on this runner; {INSTALL_HINT}"
    # --as-pid-1: no init of bwrap's own, which would outlive the outer process and end as our zombie
    # --unshare-net: the server's own network namespace (a kernel that refuses one refuses the sandbox)
    probe = [path, *_namespaces(), "--unshare-net", "--as-pid-1", *_system_binds(), "--proc", "/proc", "--dev", "/dev",
             "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap ({path}) could not be run: {exc}; {KERNEL_HINT}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return f"the kernel refused bwrap's namespaces ({said[-1] if said else f'exit {done.returncode}'}); {KERNEL_HINT}"
    return None


@functools.lru_cache(maxsize=1)
def sizes_tmpfs() -> bool:
    """Does this bwrap take ``--size`` (a size for the next ``--tmpfs``: bubblewrap 0.7 and later)?"""
    path = bwrap_path()
    if path is None:
        return False
    try:
        done = subprocess.run([path, "--help"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--size" in done.stdout + done.stderr


def scratch_quota(view: View) -> int | None:
    """The size of the tmpfs ``/tmp`` a process of ``view`` gets; None: its scratch folder, without a quota."""
    return view.scratch_bytes if view.scratch_bytes is not None and sizes_tmpfs() else None


def _namespaces(unprivileged: bool | None = None) -> list[str]:
    unprivileged = os.geteuid() != 0 if unprivileged is None else unprivileged
    user = ["--unshare-user"] if unprivileged else []
    return [*user, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL"]


def _system_binds() -> list[str]:
    args: list[str] = []
    for name in SYSTEM_DIRS:
        if os.path.islink(name):  # noqa: PTH114 - merged /usr: keep the link, it points into /usr
            args += ["--symlink", os.readlink(name), name]  # noqa: PTH115
        elif os.path.isdir(name):  # noqa: PTH112
            args += ["--ro-bind", name, name]
    return args


def _expand(patterns: Iterable[str]) -> list[str]:
    return sorted({hit for pattern in patterns for hit in glob.glob(pattern)})  # noqa: PTH207


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _aliases(binds: Sequence[Bind], shown: Sequence[Path]) -> list[str]:
    """A link at each path as named that lies elsewhere (a model in a cache of links), where nothing bound shows it."""
    args: list[str] = []
    for bind in binds:
        named = bind.opened.named
        if named == bind.at or _within(named, shown) is not None or any(s.is_relative_to(named) for s in shown):
            continue
        args += ["--symlink", str(bind.at), str(named)]
        shown = [*shown, named]
    return args


def _dev_scratch(view: View) -> list[str]:
    """``/dev`` read-only once its nodes are in place (bubblewrap's fresh ``/dev`` is a tmpfs of no size, so a file
    written there would be memory without a bound), and ``/dev/shm`` a tmpfs of its own: of the view's scratch quota
    where it has one (the server's, like its ``/tmp``)."""
    quota = scratch_quota(view)
    return ["--remount-ro", "/dev", *(["--size", str(quota)] if quota is not None else []), "--tmpfs", "/dev/shm"]  # noqa: S108 - the sandbox's own


def _user_binds(binds: Sequence[Bind], policy: Policy, view: View, scratch: Path) -> list[str]:
    args = ["--bind", str(scratch), INSIDE_TMP]  # named even under a tmpfs: the watchdog finds the bwrap by it
    quota = scratch_quota(view)
    if quota is not None:
        args += ["--size", str(quota), "--tmpfs", INSIDE_TMP]
    for bind in binds:
        args += [bind.option, str(bind.opened.fd), str(bind.at)]
    shown = [bind.at for bind in binds]
    for over, covered in (("--ro-bind", policy.frozen), ("--tmpfs", policy.hidden)):
        hits = sorted({str(real(p)) for p in covered if p.exists() and _within(real(p), shown) is not None})
        if over == "--tmpfs":  # a folder inside one already covered is hidden with it (and bwrap cannot mkdir there)
            hits = [h for h in hits if not any(h != o and Path(h).is_relative_to(o) for o in hits)]
        for hit in hits:
            args += [over, hit, "--remount-ro", hit] if over == "--tmpfs" else [over, hit, hit]
    system = [Path(p) for p in (*SYSTEM_DIRS, *_expand((*ETC_FILES, *TOOLCHAINS)), *FRESH)]
    return args + _aliases(binds, [*system, *shown])


def argv(
    command: Sequence[str], policy: Policy, view: View, *, scratch: Path, cwd: Path | None, status_fd: int,
    unprivileged: bool | None = None,
) -> Argv:
    """The bwrap command line that runs ``command`` in the view (``status_fd``: bwrap's JSON status), with the
    descriptors of its binds (pass them to bwrap, close them once it started).

    ``unprivileged`` (default: not root) adds a user namespace that maps only the caller's uid and gid.
    """
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed on this runner; {INSTALL_HINT}")
    args = [path, *_namespaces(unprivileged), *(["--unshare-net"] if view.own_network else []), *_system_binds()]
    for name in _expand((*ETC_FILES, *TOOLCHAINS)):
        args += ["--ro-bind", name, name]
    args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys", *cpu_online_bind(view.cpu_online, scratch)]
    for node in _expand((*DEFAULT_DEVICES, *policy.devices)):
        args += ["--dev-bind", node, node]
    args += _dev_scratch(view)
    binds = checked_binds(policy, view)
    try:
        args += _user_binds(binds, policy, view, scratch)
    except BaseException:
        close_binds(binds)
        raise
    args += ["--chdir", str(cwd) if cwd else INSIDE_TMP, "--json-status-fd", str(status_fd), "--", *command]
    return Argv(args, [bind.opened.fd for bind in binds])


def is_hidden_name(name: str) -> bool:
    """Is this environment variable kept from sandboxed code (a credential, or ds4ci's/GitHub's/the runner's)?

    The server's own families (``DFLASH_``, ``LUCE_``, ``GGML_``, ``HIP_``, ``CUDA_``..., the simulator's
    ``DS4SIM_``) pass even when a word such as TOKEN is in the name (``DS4SIM_TOKEN_DELAY``).
    """
    if name.startswith(_SERVER_FAMILIES):
        return False
    return name in _DROPPED_NAMES or name.startswith(_DROPPED_PREFIXES) or bool(_SECRET_WORDS.search(name))


def environment(given: Mapping[str, str]) -> dict[str, str]:
    """The sandboxed process's environment: ``given`` without any hidden name, HOME and TMPDIR the scratch."""
    env = {k: v for k, v in given.items() if not is_hidden_name(k)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(HOME=INSIDE_TMP, TMPDIR=INSIDE_TMP)
    return env
