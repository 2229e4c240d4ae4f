"""A width's proof coverage into its results.json entry, and the coverage policy applied to its verdict.

Derive calls ``apply`` once per judged width with that width's requests (their per-step records, in
request order, and each request's prompt token count from its answer, ``prompt_tokens``). The
record is always written; with ``require_coverage`` an unmet minimum (judging.coverpolicy) turns a
passing width into a failing one, its reasons naming what was not exercised. A width that already
failed or could not be judged keeps its verdict and gains the reasons.
"""

from __future__ import annotations

from collections.abc import Sequence

from ds4ci.judging import coverpolicy
from ds4ci.judging.coverage import RequestSteps, width_coverage
from ds4ci.judging.verdict import FAIL, PASS
from ds4ci.records import WidthResult


def prompt_tokens(response: object) -> int | None:
    """``usage.prompt_tokens`` of a chat completion, when it is a non-negative integer; else None."""
    usage = response.get("usage") if isinstance(response, dict) else None
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def apply(width: WidthResult, requests: Sequence[RequestSteps], required: bool) -> None:
    cov = width_coverage(width["q"], requests)
    unmet = coverpolicy.unmet(cov)
    width["coverage"] = cov.to_json(unmet)
    if required and unmet:
        width["reasons"] = [*width["reasons"], *unmet]
        if width["verdict"] == PASS:
            width["verdict"] = FAIL
