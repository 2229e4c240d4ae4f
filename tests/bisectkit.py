"""A fake bisect step runner for unit tests: a history as a string, one character per commit from the good end
to the bad end: ``p`` passes, ``f`` fails, ``s`` does not build (skipped), ``x`` the gate refuses (stops)."""

from __future__ import annotations

from ds4ci.bisect.search import Search, bisect
from ds4ci.records import BisectCommit, BisectStep

_OUTCOMES = {"p": "pass", "f": "fail", "s": "skip", "x": "stop"}


def commits(history: str) -> list[BisectCommit]:
    return [{"sha": f"{i:040x}", "subject": f"commit {i}"} for i in range(len(history))]


def search(history: str) -> tuple[Search, list[int]]:
    """The search over ``history``, and the positions it ran, in order."""
    ran: list[int] = []

    def run_step(position: int, commit: BisectCommit) -> BisectStep:
        ran.append(position)
        outcome = _OUTCOMES[history[position]]
        differences = [{"q": 3, "prompt_index": 0, "position": 42, "reason": "token IDs differ"}] if outcome == "fail" else []
        return {**commit, "position": position, "outcome": outcome, "exit_code": 0, "reason": f"{outcome} here",
                "duration_s": 1.0, "evidence": f"/evidence/{position}", "differences": differences}  # type: ignore[typeddict-item]

    return bisect(Search(commits(history)), run_step), ran
