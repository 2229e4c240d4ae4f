"""A width's proof coverage into its results.json entry, and the coverage policy applied to its verdict.

Derive calls ``apply`` once per judged width with that width's requests (their per-step records, in
request order, zipped by ``requests`` with each request's prompt token count from its sealed
answer, ``prompt_token_counts``). The
record is always written; with ``require_coverage`` an unmet minimum (judging.coverpolicy) turns a
passing width into a failing one, its reasons naming what was not exercised. A width that already
failed or could not be judged keeps its verdict and gains the reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ds4ci.judging import coverpolicy, judge
from ds4ci.judging.coverage import RequestSteps, width_coverage
from ds4ci.judging.specsteps import SpecStep
from ds4ci.judging.verdict import FAIL, PASS
from ds4ci.records import WidthResult


def prompt_tokens(response: object) -> int | None:
    """``usage.prompt_tokens`` of a chat completion, when it is a non-negative integer; else None."""
    usage = response.get("usage") if isinstance(response, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def prompt_token_counts(attempt: Path, key: str) -> list[int | None]:
    """Per request of server ``key``, in the lifecycle's order: its answer's prompt token count (None: not answered)."""
    counts: list[int | None] = []
    for entry in judge.load_lifecycle(attempt, key)["requests"]:
        answered = entry.get("answered") is True and isinstance(entry.get("response"), str)
        counts.append(prompt_tokens(judge.read_json(attempt, entry["response"])) if answered else None)
    return counts


def requests(steps: Sequence[Sequence[SpecStep]], counts: Sequence[int | None]) -> list[RequestSteps]:
    """Each request's steps with its prompt token count (both in the lifecycle's order)."""
    if len(steps) != len(counts):
        raise judge.EvidenceError(f"coverage: {len(steps)} requests' steps but {len(counts)} prompt token counts")
    return [RequestSteps(tuple(s), n) for s, n in zip(steps, counts, strict=True)]


def apply(width: WidthResult, requests: Sequence[RequestSteps], required: bool) -> None:
    cov = width_coverage(width["q"], requests)
    unmet = coverpolicy.unmet(cov)
    width["coverage"] = cov.to_json(unmet)
    if required and unmet:
        width["reasons"] = [*width["reasons"], *unmet]
        if width["verdict"] == PASS:
            width["verdict"] = FAIL
