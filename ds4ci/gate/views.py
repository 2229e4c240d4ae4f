"""What each PR process of a gate run may see: the sandbox policy from ``[sandbox]``, and per-process views.

- the server: its binary's folder, the target and draft models, the checkout (``source_dir``,
  the build's folder), all read-only; with ``gate.server = "simulator"`` (ds4ci's bundled simulator,
  named by the trusted config, never by a file's first line), ds4ci's environment read-only too;
- a check: its folder read-only, the folder of its JUnit report writable;
- the build: its own folder writable, the ``.git`` in it read-only.

Only trusted sources choose a bind: the configuration, ds4ci's own environment and fixed system
paths. Nothing the checkout or the server binary holds (a first line naming an interpreter, a
``pyvenv.cfg``, a ``.pth`` file) adds one. Every view lists the same trees (:func:`pr_trees`: the checkout
and every folder PR code may write); a path named inside them is opened beneath them with no link followed
(``supervisor.resolve``), and before any PR process starts every configured folder is opened so
(:func:`refuse_links`): a link at or inside one stops the run. Every bind passes the rules of
``supervisor.sandbox`` (never ``/`` nor ``/proc``, ``/dev``, ``/sys``, ``/run``, never a home-like folder whole,
nothing of a self-hosted runner's install but its ``_work`` folder, never inside the evidence or a key folder).
Wherever a bound folder would show them, the evidence folder and the runner keys' folder are covered by an
empty tmpfs, and ds4ci's own install is bound read-only again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import ds4ci
from ds4ci import supervisor
from ds4ci.errors import NoVerdictError
from ds4ci.evidence import keys
from ds4ci.fileio import checkout_holding
from ds4ci.log import Logger
from ds4ci.options.config import GateConfig
from ds4ci.options.sections import BuildSpec, CheckSpec
from ds4ci.supervisor import resolve, sandbox

RUNNER_MARKS = (".runner", ".credentials", ".credentials_rsaparams")  # files of a self-hosted runner's install
RUNNER_LAYOUT = ("_work", "externals")  # folders of one, found together


def runner_installs() -> tuple[Path, ...]:
    """Self-hosted runners' installs: a folder above the workspace or the working folder holding ``.runner`` or
    ``.credentials``, or both ``_work`` and ``externals``; nothing in one but its ``_work`` folder is ever shown."""
    found: list[Path] = []
    starts = (os.environ.get("RUNNER_WORKSPACE"), os.environ.get("GITHUB_WORKSPACE"), str(Path.cwd()))
    for start in filter(None, starts):
        resolved = sandbox.real(Path(start))
        found += [f for f in (resolved, *resolved.parents) if any(os.path.lexists(f / m) for m in RUNNER_MARKS)
                  or all(os.path.isdir(f / m) for m in RUNNER_LAYOUT)]  # noqa: PTH112
    return tuple(dict.fromkeys(found))


def runner_folders() -> tuple[Path, ...]:
    """The runner's own folders, never shown whole: ``$RUNNER_TEMP`` (the job's command files) and the
    runner's installs (:func:`runner_installs`)."""
    found = [Path(os.environ["RUNNER_TEMP"])] if os.environ.get("RUNNER_TEMP") else []
    return tuple(dict.fromkeys((*found, *runner_installs())))


def policy(cfg: GateConfig) -> supervisor.Policy:
    box = cfg.sandbox
    hidden = [cfg.evidence_dir.absolute(), keys.default_folder()]
    if cfg.signing_key is not None:
        hidden.append(cfg.signing_key.absolute().parent)
    frozen = (Path(ds4ci.__file__).resolve().parent, Path(sys.prefix))
    return supervisor.Policy(
        require=box.require, ro_paths=box.ro_paths, rw_paths=box.rw_paths, devices=box.devices, enabled=box.enabled,
        hidden=tuple(hidden), frozen=frozen, homes=(Path.home(), *runner_folders()), installs=runner_installs(),
    )


def prepare(cfg: GateConfig, progress: Logger | Callable[[str], None]) -> None:
    """Configure the supervisor from ``[sandbox]``; stop (no verdict, exit 3) when it is required but cannot run."""
    sup = supervisor.default()
    sup.configure(policy(cfg))
    try:
        sup.require_sandbox()
    except supervisor.SandboxUnavailable as exc:
        raise NoVerdictError(f"{exc}; no PR code was run") from exc
    refuse_links(cfg)
    why = sup.sandbox_refusal()
    if why is None:
        refuse_hidden_inside_views(cfg)
        progress("sandbox: PR code runs under bubblewrap (level: sandbox)")
    elif cfg.sandbox.cpu_online:  # the online CPU list is the sandbox's own file: without it nothing would say so
        raise NoVerdictError(f"sandbox.cpu_online (--sandbox-cpu-online) needs the sandbox, which is not used here "
                             f"({why}); no PR code was run")
    else:
        progress(f"sandbox: not used ({why}); PR code runs in a PID namespace where the kernel allows")


def _hidden_names(cfg: GateConfig) -> dict[Path, str]:
    names = {Path.home(): "the home folder of the user the gate runs as", keys.default_folder(): "the runner key folder",
             cfg.evidence_dir.absolute(): "the evidence folder"}
    if cfg.signing_key is not None:
        names[cfg.signing_key.absolute().parent] = "the signing key's folder"
    return names


def hidden_inside_views(cfg: GateConfig) -> list[str]:
    """Paths a PR process must see that lie inside a folder the sandbox hides from it (an empty tmpfs covers a
    hidden folder wherever a shown one holds it, and so would cover these too, or bwrap fails to start)."""
    box = policy(cfg)
    views = [("the server", server_view(cfg))]
    views += [(f"check {spec.name!r}", supervisor.View(ro=(_absolute(spec.cwd),))) for spec in cfg.checks]
    if cfg.build is not None:
        views.append(("the build", build_view(cfg.build, pr_trees(cfg))))
    names = _hidden_names(cfg)
    problems: list[str] = []
    for role, view in views:
        shown = [p.absolute() for p in (*view.ro, *view.rw, *view.extra, *box.ro_paths, *box.rw_paths)]
        for hidden in box.hidden:
            if not hidden.exists() or not any(hidden.is_relative_to(b) for b in shown):
                continue  # not covered: no shown folder holds it
            for inside in sorted({p for p in shown if p.is_relative_to(hidden)}):
                problems.append(
                    f"{role} must see {inside}, which lies inside {hidden} ({names.get(hidden, 'a hidden folder')}): "
                    "the sandbox hides that folder from PR code")
    return list(dict.fromkeys(problems))


def refuse_hidden_inside_views(cfg: GateConfig) -> None:
    """Before any PR process starts: stop (no verdict) with what to move, instead of every server dying in bwrap."""
    problems = hidden_inside_views(cfg)
    if problems:
        raise NoVerdictError(
            "; ".join(problems[:5]) + "; move the models, the server and the checkout out of that folder (e.g. "
            "under /opt or /srv), the runner key elsewhere (gate.signing_key, or XDG_CONFIG_HOME for "
            "`ds4ci runner-key init`), or the evidence with --evidence-dir; no PR code was run")


def _absolute(path: Path | None) -> Path:
    return (path or Path.cwd()).absolute()


def launcher(cfg: GateConfig) -> tuple[str, ...]:
    """What runs the server's file: nothing for a program; ds4ci's own Python for ``server = "simulator"``, with
    ``-I`` so that no PYTHON* variable, user site or script folder changes what the simulator imports."""
    return (sys.executable, "-I") if cfg.simulator else ()


def interpreters(cfg: GateConfig) -> tuple[str, ...] | None:
    """The interpreters a script server may name (``gate.server_interpreters``); None for the simulator, which
    ds4ci's own Python runs (:func:`launcher`)."""
    return None if cfg.simulator else cfg.server_interpreters


def checkout(cfg: GateConfig) -> Path | None:
    """The pull request's checkout: ``source_dir``, else the git checkout the gate runs in (the nearest folder from
    the working folder up that holds ``.git``, as where the action runs it); None when there is neither."""
    if cfg.source_dir is not None:
        return cfg.source_dir.absolute()
    return checkout_holding(Path.cwd())


def pr_trees(cfg: GateConfig) -> tuple[Path, ...]:
    """The checkout and every folder pull-request code may write (the build's, the built server's, each check's
    and its report's, ``[sandbox] rw_paths``): the trees of every view. A file ds4ci reads there, and every bind
    named there, is opened beneath them with no link followed (``supervisor.resolve``, ``fileio.open_regular``)."""
    top = checkout(cfg)
    trees = [*([top] if top is not None else []), *_build_trees(cfg.build)]
    for spec in cfg.checks:
        trees.append(_absolute(spec.cwd))
        if spec.report is not None:
            trees.append(spec.report.absolute().parent)
    trees += cfg.sandbox.rw_paths
    return tuple(dict.fromkeys(sandbox.plain(t) for t in trees))


def configured_folders(cfg: GateConfig) -> list[tuple[str, Path]]:
    """(setting, folder) for every folder a PR process is shown or writes: the build's, the server's,
    each check's and its report's, each ``[sandbox] ro_paths`` and ``rw_paths`` entry."""
    found: list[tuple[str, Path]] = []
    if cfg.source_dir is not None:
        found.append(("gate.source_dir", cfg.source_dir))
    if cfg.build is not None:
        found.append(("build.cwd", _absolute(cfg.build.cwd)))
        found.append(("build.server_bin (its folder)", cfg.build.server_bin.absolute().parent))
    else:
        found.append(("gate.server_bin (its folder)", cfg.server_bin.path.absolute().parent))
    for spec in cfg.checks:
        found.append((f"checks {spec.name!r} cwd", _absolute(spec.cwd)))
        if spec.report is not None:
            found.append((f"checks {spec.name!r} report (its folder)", spec.report.absolute().parent))
    found += [("sandbox.ro_paths", p) for p in cfg.sandbox.ro_paths]
    found += [("sandbox.rw_paths", p) for p in cfg.sandbox.rw_paths]
    return found


def refuse_links(cfg: GateConfig) -> None:
    """Before any PR process starts: every configured folder opened through the resolver as far as it exists; a
    symbolic link at its root or on its way inside the checkout stops the run (no verdict), naming the setting."""
    trees = pr_trees(cfg)
    problems = [why for key, path in configured_folders(cfg) if (why := resolve.check_path(key, path, trees))]
    if problems:
        raise NoVerdictError("; ".join(dict.fromkeys(problems)) + "; no PR code was run")


def _build_trees(build: BuildSpec | None) -> tuple[Path, ...]:
    """The folders a build writes: its own, and the folder of the server it builds when that lies outside."""
    if build is None:
        return ()
    cwd, out = _absolute(build.cwd), build.server_bin.absolute().parent
    return (cwd,) if out.is_relative_to(cwd) else (cwd, out)


def server_view(cfg: GateConfig) -> supervisor.View:
    ro = [cfg.server_bin.path.absolute().parent, cfg.target.path.absolute(), cfg.draft.path.absolute()]
    if cfg.simulator:  # the trusted config names ds4ci's own simulator: its interpreter and install, read-only
        ro += sandbox.python_runtime()
    shown = _build_trees(cfg.build)
    if cfg.source_dir is not None:
        shown = (cfg.source_dir.absolute(), *shown)
    return supervisor.View(ro=tuple(dict.fromkeys((*ro, *shown))), trees=pr_trees(cfg), cpu_online=cfg.sandbox.cpu_online)


def check_view(spec: CheckSpec, trees: Sequence[Path] = ()) -> supervisor.View:
    """Its folder read-only; the folder of its JUnit report writable (created here when missing, beneath the
    trees with no link followed: a link on the way is refused, ``resolve.PathRefused``)."""
    cwd = _absolute(spec.cwd)
    rw: tuple[Path, ...] = ()
    every = (*trees, cwd)
    if spec.report is not None:
        folder = spec.report.absolute().parent
        every = (*every, folder)
        resolve.make_folder(f"checks {spec.name!r} report (its folder)", folder, every)
        rw = (folder,)
    return supervisor.View(ro=(cwd,), rw=rw, trees=every)


def build_view(spec: BuildSpec, trees: Sequence[Path] = ()) -> supervisor.View:
    """Its own folder writable, and the server's folder when that lies outside it and exists."""
    own = _build_trees(spec)
    every = (*trees, *own)
    shown = tuple(t for t in own if t == _absolute(spec.cwd) or os.path.lexists(t))  # a link: the resolver refuses it
    return supervisor.View(rw=shown, trees=every)


def git_dirs(writable: Sequence[Path], source_dir: Path | None) -> tuple[Path, ...]:
    """The ``.git`` of each writable folder and of ``source_dir`` where a writable folder holds it: shown read-only,
    so no build writes a repository config, hook or HEAD that git or a later job would follow."""
    found = [folder / ".git" for folder in writable]
    if source_dir is not None:
        found.append(source_dir.absolute() / ".git")
    shown = [p for p in found if p.exists() and not p.is_symlink() and any(p.is_relative_to(w) for w in writable)]
    return tuple(dict.fromkeys(shown))
