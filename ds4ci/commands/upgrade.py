"""``ds4ci upgrade --ds4ci-ref OWNER/NAME@REF``: the workflows ``ds4ci init`` wrote, moved to another ds4ci.

The short ``gate.yml`` that calls ds4ci's own (``caller``) gets its two pins moved and keeps every other
line. Full copies are rewritten as this ds4ci ships them with their ``DS4CI_REF`` line set to the ref (install
the ds4ci of that ref first, so the copies are the ones it ships). ``ds4ci.toml`` is never opened for
writing: its settings are the adopter's. Every workflow is rendered before any is written.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from ds4ci.commands import caller
from ds4ci.commands.init import WORKFLOWS, render_workflow, workflow_source
from ds4ci.commands.workflowpin import ref_in
from ds4ci.errors import EXIT_PASS, UsageError
from ds4ci.options.values import ds4ci_ref


def _changed_lines(old: str, new: str) -> int:
    """Lines changed, added or removed between the two texts, the DS4CI_REF line left out."""
    before = [line for line in old.splitlines() if "DS4CI_REF:" not in line]
    after = [line for line in new.splitlines() if "DS4CI_REF:" not in line]
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


def run_upgrade(directory: Path, ref: str) -> int:
    ds4ci_ref(ref, "--ds4ci-ref")
    folder = directory / ".github" / "workflows"
    paths = [folder / name for name in WORKFLOWS]
    for path in paths:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise UsageError(f"{path}: expected a workflow file, found {'a link' if path.is_symlink() else 'a folder'}; "
                             "nothing was written")
    if not any(p.is_file() for p in paths):
        raise UsageError(f"no {' or '.join(WORKFLOWS)} in {folder}: expected the workflows `ds4ci init` wrote; write "
                         f"them with `ds4ci init --ds4ci-ref {ref}`")
    found = {p: p.read_text(encoding="utf-8", errors="replace") for p in paths if p.is_file()}
    gate = found.get(folder / caller.NAME)
    if gate is not None and caller.is_caller(gate):  # the short caller: its two pins move, nothing else
        path = folder / caller.NAME
        planned = {path: caller.repin(gate, ref, path)}
    else:
        planned = {p: render_workflow(workflow_source(p.name), ref) for p in paths}
    said = []
    for path, text in planned.items():
        old = found.get(path)
        if old == text:
            said.append(f"  {path}: already at {ref}")
            continue
        path.write_text(text, encoding="utf-8")
        if old is None:
            said.append(f"  {path}: written (it was missing), DS4CI_REF {ref}")
        elif caller.is_caller(old):
            said.append(f"  {path}: calls {ref} (uses: and ds4ci-ref; was {caller.pins(old)[1]!r}); every other "
                        "line kept")
        else:
            others = _changed_lines(old, text)
            note = f"; {others} other line(s) now as this ds4ci ships them" if others else ""
            said.append(f"  {path}: DS4CI_REF {ref_in(old)!r} -> {ref!r}{note}")
    print("upgraded:\n" + "\n".join(said))
    print(f"{directory / 'ds4ci.toml'}: not touched (upgrade never writes it); check it with `ds4ci config check`")
    return EXIT_PASS
