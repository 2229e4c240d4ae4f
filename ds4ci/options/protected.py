"""Folders no path of the gate's config may reach: the signing key's, the gate service's state, ds4ci's install.

Every path the config names (files the gate reads, files it writes, folders the sandbox binds) is
resolved with ``realpath`` (every link and ``..`` followed) and compared with each protected folder,
itself resolved. A path that lies in one is refused (exit 2) with a message naming the config key and
the folder: the key's folder and the service's state (its request records, evidence and private
checkouts) are never read, written or bound by a gate, and ds4ci's own install is never written. A
folder bound into the sandbox that *holds* a protected folder is refused too, since the bind would
show it (the signing key's folder excepted: the sandbox covers it with an empty tmpfs wherever a bound
folder holds it). Paths given on the command line are the caller's own (the service's ``--evidence-dir``,
``--source-dir``...) and are not checked; under the service, the request's own checkout
(``--source-dir``) is the pull request's files, where the config's relative paths point.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options.config import GateConfig

READ, WRITE, BIND = "read", "write", "bind"


@dataclass(frozen=True)
class Protected:
    folders: tuple[tuple[str, Path], ...]  # (what it is, resolved folder): never read, written or bound
    unshown: tuple[Path, ...] = ()  # of those, the ones no bind may hold either (the sandbox does not cover them)
    install: tuple[Path, ...] = ()  # ds4ci's own install, resolved: never written nor bound writable
    exempt: Path | None = None  # the service's checkout of the request: the pull request's own files
    quiet: bool = False  # the gate service's run: no digest of a file read is shown before it matched its pin


def resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def install_folders() -> tuple[Path, ...]:
    """ds4ci's package folder, and the virtual environment it runs in (never a system prefix such as /usr)."""
    import ds4ci

    found = [resolved(Path(ds4ci.__file__).parent)]
    if sys.prefix != sys.base_prefix:
        found.append(resolved(Path(sys.prefix)))
    return tuple(found)


def protected_for(cfg: GateConfig, signing_key: Path | None) -> Protected:
    folders: list[tuple[str, Path]] = []
    if signing_key is not None:
        folders.append(("the signing key's folder", resolved(signing_key.absolute().parent)))
    state = resolved(cfg.service_state) if cfg.service_state is not None else None
    if state is not None:
        folders.append(("the gate service's state folder", state))
    exempt = resolved(cfg.source_dir) if state is not None and cfg.source_dir is not None else None
    return Protected(tuple(folders), unshown=(state,) if state is not None else (), install=install_folders(),
                     exempt=exempt, quiet=state is not None)


def config_paths(cfg: GateConfig, flags: Mapping[str, Any]) -> Iterator[tuple[str, str, Path]]:
    """(config key, kind, path) for every path of ``cfg`` that the command line (``flags``) did not give."""
    def unless_flag(name: str, key: str, kind: str, path: Path | None) -> Iterator[tuple[str, str, Path]]:
        if path is not None and flags.get(name) is None:
            yield key, kind, path

    if cfg.prebuilt_server_bin is not None and not cfg.simulator:
        yield from unless_flag("server_bin", "gate.server_bin", READ, cfg.prebuilt_server_bin)
    for key, pinned in (("gate.target", cfg.target), ("gate.draft", cfg.draft)):
        if str(pinned.path) not in ("", "."):
            yield from unless_flag(key.split(".")[1], key, READ, pinned.path)
    if not flags.get("prompt_files"):
        yield from (("gate.prompts", READ, p.path) for p in cfg.prompts)
    yield from (("gate.stale_override_files", READ, p) for p in cfg.stale_override_files)
    yield from unless_flag("hash_cache_path", "gate.hash_cache_path", WRITE, cfg.hash_cache_path)
    for name in ("evidence_dir", "results_out", "bundle_out"):
        yield from unless_flag(name, f"gate.{name}", WRITE, getattr(cfg, name))
    yield from unless_flag("source_dir", "gate.source_dir", BIND, cfg.source_dir)
    yield from unless_flag("signing_key", "gate.signing_key", READ, cfg.signing_key)
    yield from unless_flag("calibrations", "gate.calibrations", READ, cfg.calibrations)
    if cfg.build is not None:
        yield "build.server_bin", READ, cfg.build.server_bin
        if cfg.build.cwd is not None:
            yield "build.cwd", BIND, cfg.build.cwd
    for check in cfg.checks:
        if check.cwd is not None:
            yield f"checks[{check.name}].cwd", BIND, check.cwd
        if check.report is not None:
            yield f"checks[{check.name}].report", BIND, check.report.absolute().parent
    yield from (("sandbox.ro_paths", BIND, p) for p in cfg.sandbox.ro_paths)
    yield from (("sandbox.rw_paths", BIND, p) for p in cfg.sandbox.rw_paths)


def problem(key: str, kind: str, path: Path, protected: Protected) -> str | None:
    """Why ``path`` (named by ``key``, used as ``kind``) is refused; None when it is outside every protected folder."""
    real = resolved(path.absolute())
    if protected.exempt is not None and _within(real, protected.exempt):
        return None
    for what, folder in protected.folders:
        if _within(real, folder):
            return (f"{key} = {path} resolves to {real}, inside {what} {folder}; no path of the gate's config may "
                    "be read, written or bound there")
        if kind == BIND and folder in protected.unshown and real in folder.parents:
            return (f"{key} = {path} resolves to {real}, which holds {what} {folder}; the sandbox would show it, "
                    "so no path of the gate's config may bind it")
    if kind in (WRITE, BIND) and any(_within(real, folder) for folder in protected.install) and key != "sandbox.ro_paths":
        return f"{key} = {path} resolves to {real}, inside ds4ci's own install; the gate never writes or binds it writable"
    return None


def refuse(cfg: GateConfig, flags: Mapping[str, Any], protected: Protected) -> None:
    """UsageError naming every config path that reaches a protected folder (before anything runs or is read)."""
    found = [p for key, kind, path in config_paths(cfg, flags) if (p := problem(key, kind, path, protected))]
    if found:
        raise UsageError("; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else ""))


def refuse_file(role: str, path: Path, protected: Protected) -> None:
    """A file about to be read (hashed) now: the same rule, resolved again at the moment of reading."""
    said = problem(role, READ, path, protected)
    if said is not None:
        raise UsageError(said)
