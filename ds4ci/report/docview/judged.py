"""What a runner's commit status is, decided from its document once (the view carries it to every form).

Only a result whose verdict is ``pass`` *and* is internally consistent becomes ``success`` (a negative control's:
every check passed, no width claimed); a pass the document contradicts is an ``error``.
"""

from __future__ import annotations

from ds4ci.judging.tree import tree_note
from ds4ci.records import Results


def consistent_pass(doc: Results) -> bool:
    """A pass that the rest of the document agrees with (fail closed on contradictions).

    A gate runner's pass needs every width and the target-only arm passed; a negative control (a
    runner whose hardware is not the one the exactness claim is for) runs its checks only, so its
    pass needs at least one check, every check passed, and no width claimed.
    """
    checks_ok = all(c["status"] == "pass" for c in doc["checks"])
    if doc["verdict"] != "pass" or doc["exit_code"] != 0 or not checks_ok:
        return False
    if tree_note(doc.get("revisions")) is not None and doc["settings"].get("allow_dirty_tree") is not True:
        return False  # a modified tree passes only where the config allowed it
    if doc["runner"]["role"] == "negative-control":
        return bool(doc["checks"]) and not doc["widths"]
    return (
        bool(doc["widths"])
        and all(w["verdict"] == "pass" and w["prompts"] for w in doc["widths"])
        and doc["target_only"]["verdict"] == "pass"
    )


def status_state(doc: Results) -> str:
    """success | failure | error: the commit status a runner's document earns."""
    verdict = doc["verdict"]
    if verdict == "pass":
        return "success" if consistent_pass(doc) else "error"
    return "failure" if verdict == "fail" else "error"
