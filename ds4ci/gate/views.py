"""What each PR process of a gate run may see: the sandbox policy from ``[sandbox]``, and per-process views.

- the server: its binary's folder, the target and draft models, the checkout (``source_dir``,
  the build's folder), all read-only; for a script run by a Python virtual environment (the bundled
  simulator), that environment read-only too;
- a check: its folder read-only, the folder of its JUnit report writable;
- the build: its own folder writable.

Wherever a bound folder would show them, the evidence folder and the runner keys' folder are
covered by an empty tmpfs, and ds4ci's own install is bound read-only again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import ds4ci
from ds4ci import supervisor
from ds4ci.errors import NoVerdictError
from ds4ci.evidence import keys
from ds4ci.log import Logger
from ds4ci.options.config import GateConfig
from ds4ci.options.sections import BuildSpec, CheckSpec


def policy(cfg: GateConfig) -> supervisor.Policy:
    box = cfg.sandbox
    hidden = [cfg.evidence_dir.absolute(), keys.default_folder(), Path.home()]
    if cfg.signing_key is not None:
        hidden.append(cfg.signing_key.absolute().parent)
    frozen = (Path(ds4ci.__file__).resolve().parent, Path(sys.prefix))
    return supervisor.Policy(
        require=box.require, ro_paths=box.ro_paths, rw_paths=box.rw_paths, devices=box.devices, enabled=box.enabled,
        hidden=tuple(hidden), frozen=frozen,
    )


def prepare(cfg: GateConfig, progress: Logger | Callable[[str], None]) -> None:
    """Configure the supervisor from ``[sandbox]``; stop (no verdict, exit 3) when it is required but cannot run."""
    sup = supervisor.default()
    sup.configure(policy(cfg))
    try:
        sup.require_sandbox()
    except supervisor.SandboxUnavailable as exc:
        raise NoVerdictError(f"{exc}; no PR code was run") from exc
    why = sup.sandbox_refusal()
    if why is None:
        refuse_hidden_inside_views(cfg)
        progress("sandbox: PR code runs under bubblewrap (level: sandbox)")
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
        views.append(("the build", build_view(cfg.build)))
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


def _shebang(binary: Path) -> Path | None:
    """The interpreter a script names on its first line (through ``/usr/bin/env NAME`` too), or None."""
    try:
        with binary.open("rb") as fh:
            head = fh.read(512)
    except OSError:
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", errors="replace").split() if head.startswith(b"#!") else []
    if len(words) > 1 and Path(words[0]).name == "env":
        found = shutil.which(words[1])
        return Path(found) if found else None
    return Path(words[0]) if words else None


def interpreter_view(binary: Path) -> tuple[Path, ...]:
    """When the server is a script run by a Python virtual environment (the bundled simulator's console
    script, ``ds4ci-sim``), that environment read-only: its folder, the base installation it was made
    from, and the folders its ``.pth`` files add (an editable install's source). Nothing for a binary."""
    interpreter = _shebang(binary)
    if interpreter is None or not (interpreter.parent.parent / "pyvenv.cfg").is_file():
        return ()
    venv = interpreter.parent.parent
    found = [venv, Path(os.path.realpath(interpreter)).parent.parent]
    for pth in venv.glob("lib/python*/site-packages/*.pth"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found += [Path(line) for line in pth.read_text(encoding="utf-8").split() if line.startswith("/")]
    return tuple(dict.fromkeys(p for p in found if p.is_dir()))


def server_view(cfg: GateConfig) -> supervisor.View:
    ro = [cfg.server_bin.path.absolute().parent, cfg.target.path.absolute(), cfg.draft.path.absolute()]
    ro += interpreter_view(cfg.server_bin.path.absolute())
    if cfg.source_dir is not None:
        ro.append(cfg.source_dir.absolute())
    if cfg.build is not None:
        ro.append(_absolute(cfg.build.cwd))
    return supervisor.View(ro=tuple(ro))


def check_view(spec: CheckSpec) -> supervisor.View:
    """Its folder read-only; the folder of its JUnit report writable (created here when missing)."""
    rw: tuple[Path, ...] = ()
    if spec.report is not None:
        folder = spec.report.absolute().parent
        folder.mkdir(parents=True, exist_ok=True)
        rw = (folder,)
    return supervisor.View(ro=(_absolute(spec.cwd),), rw=rw)


def build_view(spec: BuildSpec) -> supervisor.View:
    out = spec.server_bin.parent
    extra = (out,) if out.is_dir() and not out.is_relative_to(_absolute(spec.cwd)) else ()
    return supervisor.View(rw=(_absolute(spec.cwd), *extra))
