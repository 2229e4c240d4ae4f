"""The base branch's latest result on each runner, as GitHub's records say it: what a pull request's result is
set beside (``ds4ci.report.docview.compare``).

Read the way merge-check reads a green (``ds4ci.github.vouch``): the publisher's ``ds4ci/<runner>`` status on
the base commit the pull request names (``base.sha``), and the record of GitHub's that ties it to the trusted
gate; its numbers from the figures line of the publisher's check run there, and only where that app is the
adopter's own (``vouch = "publisher"``): a check run of ``github-actions`` can be written by any workflow of
the repository, a pull request's own included, so under that login the base's numbers (acceptance, gate time,
first difference) are not shown at all, only the vouched result. A status no record vouches for is shown as
such and compares nothing: anyone with write access can post a status, and a failure that the base "already
had" must not be something a writer made up.

Reads: the base's statuses (one request), and only where one of them names a runner: the base's check runs and
what vouching reads (the run it links, its place in the base branch, its verdict jobs; cached across runners).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ds4ci.github import checkruns, commentrecord, shapes, statuses
from ds4ci.github.client import Client
from ds4ci.github.merge import Vouch
from ds4ci.report.docview.compare import BaseResult, parse_figures

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
FAILED = ("failure",)  # what a vouching record concludes for a runner whose published verdict did not pass


def base_sha(pull: Any) -> str | None:
    """The base commit GitHub's record of the pull request names, or None where it names none."""
    base = pull.get("base") if isinstance(pull, dict) else None
    sha = base.get("sha") if isinstance(base, dict) else None
    return sha if isinstance(sha, str) and _HEX40.match(sha) else None


def _state(status: statuses.Status, vouch: Vouch) -> str | None:
    """The base's result where a record vouches for it: success, or the failure/error its status says."""
    if vouch.green:
        return "success"
    if vouch.concluded in FAILED and status.state in ("failure", "error"):
        return status.state
    return None


def results(client: Client, base: str, runners: Sequence[str], publisher: str,
            judge: Callable[[str, str], Vouch]) -> dict[str, BaseResult]:
    """runner -> the base commit's result on it, for each runner the publisher posted a status for there (a base
    that was never gated on a runner says nothing about it)."""
    found = statuses.from_creator(statuses.parse(client.commit_statuses(base), base), publisher)
    named = [r for r in runners if f"ds4ci/{r}" in found]
    app = checkruns.app_of(publisher)
    own_app = app is not None and publisher != commentrecord.SHARED_LOGIN  # whose check runs no workflow can write
    raw = client.check_runs(base) if named and own_app else []
    runs = shapes.check_runs(raw, base)
    by_id = {item["id"]: item for item in raw if isinstance(item, dict)}
    out = {}
    for runner in runners:
        context = f"ds4ci/{runner}"
        status = found.get(context)
        if status is None:
            continue
        vouch = judge(base, runner)
        state = _state(status, vouch)
        own = checkruns.own_run(runs, context, base, app)
        output = (by_id.get(own.id) or {}).get("output") if own is not None else None
        parsed = parse_figures(str((output or {}).get("text") or "")) if state is not None else None
        widths, gate_s, first = parsed if parsed is not None else ((), None, None)
        out[runner] = BaseResult(base, state, vouch.detail, widths, gate_s, first)
    return out
