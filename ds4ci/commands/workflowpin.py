"""Which ds4ci the repository's workflows run: the ``DS4CI_REF`` line ``ds4ci init`` writes into them.

``config check`` and ``preflight`` warn while it is the placeholder (or malformed, or the two workflows
disagree): the workflows refuse to run until it names ds4ci's repository and a tag or commit.
Warnings only: the gate itself does not depend on it.
"""

from __future__ import annotations

import re
from pathlib import Path

from ds4ci.commands import caller
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


def ref_in(text: str) -> str | None:
    """The value of a workflow's ``DS4CI_REF`` line; None when it has none."""
    match = _LINE.search(text)
    return caller.unquote(match.group("value")) if match is not None else None


def named(path: Path | str, text: str) -> tuple[str | None, str, list[str]]:
    """The ds4ci a workflow names, what names it (``DS4CI_REF`` of a copy, ``ds4ci-ref`` of a caller), and
    what is wrong with a caller's two pins."""
    if not caller.is_caller(text):
        return ref_in(text), "DS4CI_REF", []
    called, named = caller.pins(text)
    if called is None or named is None:
        return named or called, "ds4ci-ref", [
            f"{path}: calls ds4ci's gate workflow but names ds4ci only in {'uses:' if named is None else 'ds4ci-ref'}; "
            "expected both (`uses: OWNER/NAME/.github/workflows/gate.yml@REF` and `with: {ds4ci-ref: OWNER/NAME@REF}`)"]
    if called != named and not named.startswith(PIN_PLACEHOLDER_START):
        return named, "ds4ci-ref", [
            f"{path}: uses: calls {called} but ds4ci-ref names {named}: the workflow GitHub runs and the ds4ci it "
            "installs would differ; run `ds4ci upgrade --ds4ci-ref OWNER/NAME@REF`"]
    return named, "ds4ci-ref", []


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
        ref, label, said = named(path, text)
        out += said
        if ref is None:
            continue
        value = found[str(path)] = ref
        if value.startswith(PIN_PLACEHOLDER_START):
            out.append(f"{path}: {label} is still the placeholder, so the workflow refuses to run; set it to "
                       "ds4ci's repository and a tag or full commit (OWNER/NAME@v0.1.0), or run "
                       "`ds4ci upgrade --ds4ci-ref OWNER/NAME@REF`")
        elif not value:
            if not _is_ds4ci(root):
                out.append(f"{path}: {label} is empty, which means this repository is ds4ci itself; here the "
                           "workflow would install a ds4ci this repository does not hold: set it to OWNER/NAME@REF")
        elif not DS4CI_REF.match(value):
            out.append(f"{path}: {label}: expected OWNER/NAME@REF of ds4ci's repository, REF a tag like v0.1.0 "
                       f"or a full 40-hex commit, found {value!r}")
    if len(set(found.values())) > 1:
        out.append("the workflows name different ds4ci: " + ", ".join(f"{p}: {v!r}" for p, v in found.items())
                   + "; they must run the same one")
    return out
