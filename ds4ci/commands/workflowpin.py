"""Which ds4ci the repository's workflows run: the ``DS4CI_REF`` line ``ds4ci init`` writes into them.

``config check`` and ``preflight`` warn while it is the placeholder (or malformed, or the two workflows
disagree): the workflows refuse to run until it names ds4ci's repository and a tag or commit.
Warnings only: the gate itself does not depend on it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ds4ci.commands.init import WORKFLOWS
from ds4ci.options.values import DS4CI_REF, PIN_PLACEHOLDER_START

_LINE = re.compile(r"^\s+DS4CI_REF:[ \t]*(?P<value>.*?)[ \t]*$", re.MULTILINE)
_MAX_BYTES = 1 << 20  # a workflow is a few KiB; anything larger is not one of ours
_OWN_PROJECT = re.compile(r'^name = "ds4ci"$', re.MULTILINE)


def _root(config_file: Path) -> Path:
    """The repository the config belongs to: the nearest folder up from it with .github/ or .git."""
    start = config_file.absolute().parent
    for folder in (start, *start.parents):
        if (folder / ".github").is_dir() or (folder / ".git").exists():
            return folder
    return start


def _value(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        try:
            return str(json.loads(raw)) if raw[0] == '"' else raw[1:-1]
        except ValueError:
            return raw
    return raw


def ref_in(text: str) -> str | None:
    """The value of a workflow's ``DS4CI_REF`` line; None when it has none."""
    match = _LINE.search(text)
    return _value(match.group("value")) if match is not None else None


def _is_ds4ci(root: Path) -> bool:
    try:
        return bool(_OWN_PROJECT.search((root / "pyproject.toml").read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def warnings(config_file: Path) -> list[str]:
    """One line per problem with the workflows' DS4CI_REF; [] when they name a ds4ci (or there are none)."""
    root = _root(config_file)
    out: list[str] = []
    found: dict[str, str] = {}
    for name in WORKFLOWS:
        path = root / ".github" / "workflows" / name
        try:
            if not path.is_file() or path.stat().st_size > _MAX_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        ref = ref_in(text)
        if ref is None:
            continue
        value = found[str(path)] = ref
        if value.startswith(PIN_PLACEHOLDER_START):
            out.append(f"{path}: DS4CI_REF is still the placeholder, so the workflow refuses to run; set it to "
                       "ds4ci's repository and a tag or full commit (OWNER/NAME@v0.1.0), or run "
                       "`ds4ci upgrade --ds4ci-ref OWNER/NAME@REF`")
        elif not value:
            if not _is_ds4ci(root):
                out.append(f"{path}: DS4CI_REF is empty, which means this repository is ds4ci itself; here the "
                           "workflow would install a ds4ci this repository does not hold: set it to OWNER/NAME@REF")
        elif not DS4CI_REF.match(value):
            out.append(f"{path}: DS4CI_REF: expected OWNER/NAME@REF of ds4ci's repository, REF a tag like v0.1.0 "
                       f"or a full 40-hex commit, found {value!r}")
    if len(set(found.values())) > 1:
        out.append("the workflows name different ds4ci: " + ", ".join(f"{p}: {v!r}" for p, v in found.items())
                   + "; they must run the same one")
    return out
