"""Whether the server under test is the commit's: a run on a modified working tree is never green by default.

``revisions.dirty`` (uncommitted changes to tracked files in the source checkout) means the binary
that ran is not the one the commit builds, so a status on that commit would vouch for code it does
not hold. Unless the trusted config allows it (``gate.allow_dirty_tree``), such a run is an error
whatever its parity; allowed or not, the comment and the status say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ds4ci.errors import NoVerdictError
from ds4ci.judging.verdict import ERROR, PASS
from ds4ci.records import Verdict

MODIFIED_TREE = "built from a modified tree"
UNKNOWN_TREE = "built from a tree git could not describe"


def tree_note(revisions: Mapping[str, Any] | None) -> str | None:
    """``built from a modified tree`` (or that git could not tell), else None (a clean tree or no revisions)."""
    if not isinstance(revisions, Mapping) or "dirty" not in revisions:
        return None  # not a git checkout, or sealed before the field existed
    dirty = revisions["dirty"]
    if dirty is False:
        return None
    return MODIFIED_TREE if dirty is True else UNKNOWN_TREE


def tree_reason(revisions: Mapping[str, Any] | None, built: bool) -> str | None:
    """Why a run on this tree is an error unless allowed (``built``: a [build] made the server from it), or None."""
    note = tree_note(revisions)
    if note is None:
        return None
    what = "the binary is not the commit's" if built else "the run does not test the commit as it is"
    if note == MODIFIED_TREE:
        return (f"{note}: the source checkout had uncommitted changes to tracked files (revisions.dirty), so {what}; "
                "commit or stash them and run again, or set gate.allow_dirty_tree = true in the trusted ds4ci.toml")
    return (f"{note}: `git status` failed in the source checkout (revisions.dirty is null), so the run cannot be tied "
            "to the commit; set gate.allow_dirty_tree = true in the trusted ds4ci.toml to accept that")


def stop_if_modified(revisions: Mapping[str, Any] | None, built: bool, allowed: bool) -> None:
    """Before the build and any server (it is cheap): no verdict on a modified tree unless the config allows it."""
    why = tree_reason(revisions, built)
    if why is not None and not allowed:
        raise NoVerdictError(f"{why}; nothing was built or started")


def judge_tree(
    revisions: Mapping[str, Any] | None, allowed: bool, verdict: Verdict, reasons: list[str]
) -> tuple[Verdict, list[str]]:
    """The verdict and reasons once the source tree is taken into account, in the words every sealed bundle was
    derived with (``verify`` derives old bundles alike); said once: the gate may have stopped on it already."""
    why = tree_reason(revisions, True)
    if why is None or allowed:
        return verdict, reasons
    if verdict == PASS:
        return ERROR, [why]
    note = tree_note(revisions) or why
    return verdict, reasons if any(r.startswith(note) for r in reasons) else [*reasons, why]


def tree_line(revisions: Mapping[str, Any] | None, settings: Mapping[str, Any], reasons: list[str]) -> str | None:
    """What a report says about the tree beyond the reasons: None when clean or when the first reason says it."""
    note = tree_note(revisions)
    if note is None or (reasons and reasons[0].startswith(note)):
        return None
    allowed = settings.get("allow_dirty_tree") is True
    return f"{note} (the binary is not the commit's" + ("; allowed by gate.allow_dirty_tree)" if allowed else ")")
