"""The bundle's ``[build]`` against the trusted config's (``publish --expect-config``, ``verify --expect-config``).

The runner's checkout lies wherever its runner keeps it, so the recorded absolute ``cwd`` and ``server_bin`` are
matched against the trusted config's relative paths by their last components, and both must start from the same
folder (the config's folder on the runner).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Final

from ds4ci.records import BuildRecord


def build_mismatches(ran: BuildRecord | None, trusted: Mapping[str, Any] | None, *,
                     hashed: bool) -> list[tuple[str, object, object]]:
    """The bundle's [build] against the trusted one: the same command, and a cwd and server_bin that are the
    trusted config's paths (relative ones: the recorded absolute path ends with them; the runner's checkout lies
    wherever its runner keeps it). A build the trusted config does not ask for is a mismatch; a missing build
    only when the run went past the point where it would have run (``hashed``: it hashed its inputs)."""
    if ran is None:
        return [] if trusted is None or not hashed else [("build", None, trusted["command"])]
    if trusted is None:
        return [("build", ran["command"], None)]
    out: list[tuple[str, object, object]] = []
    if ran["command"] != trusted["command"]:
        out.append(("build.command", ran["command"], trusted["command"]))
    base = _base_of(ran["server_bin"], trusted["server_bin"])
    if base is None:
        out.append(("build.server_bin", ran["server_bin"], trusted["server_bin"]))
    cwd = trusted["cwd"] if trusted["cwd"] is not None else "."
    started = _base_of(ran["cwd"], cwd, allow_same=True)
    if started is None or (started != _ABSOLUTE and base not in (None, _ABSOLUTE) and started != base):
        out.append(("build.cwd", ran["cwd"], trusted["cwd"]))
    return out


_ABSOLUTE: Final = PurePosixPath("/")  # _base_of's answer for a trusted absolute path that matched


def _base_of(recorded: str, trusted: object, allow_same: bool = False) -> PurePosixPath | None:
    """The folder the trusted config's relative path ``trusted`` started from on the runner, read off the
    ``recorded`` absolute path that must end with it (``_ABSOLUTE`` when ``trusted`` is absolute and equal); None
    when ``recorded`` is not the place ``trusted`` names. A trusted path that climbs (``..``) matches nothing."""
    if not isinstance(trusted, str):
        return None
    have = PurePosixPath(posixpath.normpath(recorded))
    want = PurePosixPath(posixpath.normpath(trusted))
    if want.is_absolute():
        return _ABSOLUTE if have == want else None
    if ".." in want.parts or not have.is_absolute():
        return None
    if want == PurePosixPath("."):
        return have if allow_same else None
    if len(have.parts) <= len(want.parts) or have.parts[-len(want.parts):] != want.parts:
        return None
    return PurePosixPath(*have.parts[:-len(want.parts)])
