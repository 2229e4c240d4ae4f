"""A gate runner's input files (models, prompts, a prebuilt server), checked in two places.

At load (:func:`check_given`, exit 2 before anything runs): the prompts are given and pinned, a path given
as a flag exists (a mistyped ``--target`` is a usage error, as the exit-code table says), a prompt has text.
In the run (:func:`require_present`, called first by ``gate.ready``): every pinned file is on this runner and
the server is executable; a file named by the config that is not here is the runner's state, like a file that
does not match its pin, so it is no verdict (exit 3) with the attempt's evidence kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.options.sections import PinnedFile

FLAGS = {"target": "--target", "draft": "--draft", "server_bin": "--server-bin"}


def _flag(item: PinnedFile, overrides: Mapping[str, Any]) -> str | None:
    """The flag that named the file, or None when the config did."""
    if item.role in FLAGS:
        return FLAGS[item.role] if overrides.get(item.role) is not None else None
    return "--prompt-file" if overrides.get("prompt_files") else None


def check_given(prompts: Sequence[PinnedFile], pinned: Sequence[PinnedFile], server: PinnedFile | None,
                overrides: Mapping[str, Any]) -> None:
    if not prompts:
        raise UsageError("missing --prompt-file/--prompt-sha256 (or gate.prompts in the config file)")
    for prompt in prompts:
        if prompt.sha256 is None:
            raise UsageError(f"{prompt.path}: every prompt must be pinned by SHA-256")
    for item in (*pinned, *prompts, *([server] if server else [])):
        flag = _flag(item, overrides)
        if flag is not None and not item.path.is_file():
            what = "a prompt" if flag == "--prompt-file" else f"the {item.role}"
            raise UsageError(f"{flag} {item.path}: expected {what} file, found "
                             f"{'a folder' if item.path.is_dir() else 'nothing'} there")
    source = overrides.get("source_dir")
    if source is not None and not source.is_dir():
        raise UsageError(f"--source-dir {source}: expected the git checkout of the server's source, found "
                         f"{'a file' if source.exists() else 'nothing'} there")
    for prompt in prompts:  # an empty or whitespace-only prompt proves nothing
        try:
            data = prompt.path.read_bytes()
        except OSError:
            continue  # not here: require_present says so in the run
        if not data.strip():
            raise UsageError(f"{prompt.role} file {prompt.path} is empty or whitespace only; a prompt needs text")


def require_present(prompts: Sequence[PinnedFile], pinned: Sequence[PinnedFile], server: PinnedFile | None) -> None:
    for item in (*pinned, *prompts, *([server] if server else [])):
        if not item.path.is_file():
            raise NoVerdictError(f"{item.role} file {item.path} does not exist or is not a regular file "
                                 "(this runner is not ready: stage the file or fix its path)")
    if server is not None and not os.access(server.path, os.X_OK):
        raise NoVerdictError(f"server binary {server.path} is not executable (chmod +x it)")
    for prompt in prompts:
        try:
            prompt.path.read_bytes()
        except OSError as exc:
            raise NoVerdictError(f"{prompt.role} file {prompt.path} cannot be read: {exc.strerror or exc}") from exc
