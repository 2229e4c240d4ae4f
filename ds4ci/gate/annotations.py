"""A finished gate run's reasons, warnings and verdict as log lines (annotations under GitHub Actions).

Every reason and warning here is one that ``results.json`` records, so an annotation never says more than the
evidence does. A reason judged from a server's log carries that log (``file=``, inside the sealed evidence
directory); nothing here has a line number, so none is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds4ci.evidence.store import RESULTS
from ds4ci.gate.interrupt import INTERRUPTED
from ds4ci.gate.settings import scope_note
from ds4ci.judging.verdict import PASS
from ds4ci.log import Logger

# GitHub shows at most 10 error and 10 warning annotations per step; the rest are counted in one more line.
MAX_ANNOTATIONS = 10


def annotation_path(path: Path) -> str:
    """*path* relative to the working directory (the checkout under Actions) when inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _reason_logs(doc: Mapping[str, Any]) -> dict[str, str]:
    """reason -> the server log it was judged from (the target-only server's, or one width's)."""
    evidence = Path(doc["evidence"]["dir"])
    parts = [doc["target_only"], *doc["widths"]]
    logs: dict[str, str] = {}
    for part in parts:
        if part.get("server_log") and (evidence / part["server_log"]).is_file():
            for reason in part.get("reasons", []):
                if not reason.startswith(INTERRUPTED):  # ds4ci's own interrupt: no server log says it
                    logs.setdefault(reason, annotation_path(evidence / part["server_log"]))
    return logs


def announce(log: Logger, doc: Mapping[str, Any]) -> None:
    """One error per reason and one warning per warning (capped), then the verdict line."""
    title = f"ds4ci gate ({doc['runner']['name']})"
    logs = _reason_logs(doc)
    reasons: list[str] = list(doc["reasons"])
    for reason in reasons[:MAX_ANNOTATIONS]:
        log.error(reason, file=logs.get(reason), title=title)
    warnings: list[str] = list(doc["warnings"])
    for warning in warnings[:MAX_ANNOTATIONS]:
        log.warning(warning, title=title)
    more = max(0, len(reasons) - MAX_ANNOTATIONS) + max(0, len(warnings) - MAX_ANNOTATIONS)
    if more:
        log.info(f"{more} more reason(s)/warning(s) in {Path(doc['evidence']['dir']) / RESULTS}")
    verdict = doc["verdict"]
    scope = scope_note(doc.get("settings") or {})
    summary = f"verdict {verdict.upper()}{scope} (exit code {doc['exit_code']}); evidence: {doc['evidence']['dir']}"
    if verdict == PASS:
        log.notice(summary, title=title)
    else:
        count = f"{len(reasons)} reason(s)" if reasons else "no reason recorded"
        log.error(f"{summary}; {count}", title=title)
