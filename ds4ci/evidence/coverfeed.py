"""What proof coverage needs from the sealed files besides the per-step lines: each request's prompt
token count, read from its sealed answer (``judging.coverage.prompt_tokens``), in the lifecycle's order.

Derive zips these with the requests' per-step records (``judging.coverage.requests``) and hands
them to ``judging.coverpolicy.apply``, which writes the width's coverage record and applies
``require_coverage`` to its verdict.
"""

from __future__ import annotations

from pathlib import Path

from ds4ci.judging import judge
from ds4ci.judging.coverage import prompt_tokens


def prompt_token_counts(attempt: Path, key: str) -> list[int | None]:
    """Per request of server ``key``, in the lifecycle's order: its answer's prompt token count (None: not answered)."""
    counts: list[int | None] = []
    for entry in judge.load_lifecycle(attempt, key)["requests"]:
        answered = entry.get("answered") is True and isinstance(entry.get("response"), str)
        counts.append(prompt_tokens(judge.read_json(attempt, entry["response"])) if answered else None)
    return counts
