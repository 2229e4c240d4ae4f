"""What the comment says at a glance: each cause once, the rejected drafts a pass rests on, coverage in plain words.

Pure functions of a validated results document (``ds4ci.records``), used by ``report.views`` for the
templates and by the check run's title.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from ds4ci.judging.coverage import BOUNDARY_NAMES
from ds4ci.records import PromptResult, Results

_DS4CI_REF = re.compile(r"^([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@([A-Za-z0-9_./-]+)$")


def docs_link(page: str, anchor: str) -> str | None:
    """The page of ds4ci's docs on GitHub, at the ds4ci the workflow runs (``DS4CI_REF``, OWNER/NAME@REF), or None."""
    match = _DS4CI_REF.match(os.environ.get("DS4CI_REF", ""))
    if match is None:
        return None
    return f"https://github.com/{match.group(1)}/blob/{match.group(2)}/docs/{page}#{anchor}"


_PER_WIDTH = re.compile(r"^q=(\d+) (.+)$", re.DOTALL)


def grouped_reasons(reasons: Sequence[str]) -> list[str]:
    """Each cause once: reasons that differ only in their width (``q=2 X``, ``q=3 X``) become ``q=2,3 X``."""
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    for reason in reasons:
        match = _PER_WIDTH.match(reason.strip())
        key = match.group(2) if match else reason
        if key not in groups:
            groups[key] = []
            order.append(key)
        if match:
            groups[key].append(match.group(1))
    return [f"q={','.join(groups[key])} {key}" if groups[key] else key for key in order]


def matched_span(prompts: Sequence[PromptResult]) -> str | None:
    """Drafts accepted over ``prompts``: one count ("81"), the range the evidence allows where a counterless
    summary does not fix one ("79..80"), or None when a prompt has no counters."""
    low = high = 0
    for prompt in prompts:
        if prompt["matched_min"] is None or prompt["matched_max"] is None:
            return None
        low, high = low + prompt["matched_min"], high + prompt["matched_max"]
    return None if not prompts else f"{low:,}" if low == high else f"{low:,}..{high:,}"


def rejected_drafts(doc: Results) -> int | None:
    """Drafts the server's counters report rejected, summed over the widths' prompts (each prompt's
    ``rejected_drafts``, as derived), or None when one is unknown."""
    total = 0
    for width in doc["widths"]:
        for prompt in width["prompts"]:
            rejected = prompt["rejected_drafts"]
            if rejected is None:
                return None
            total += rejected
    return total


COVERAGE_DOC = ("results.md", "proof-coverage-of-one-width-coverage")


def coverage_words(rec: Any) -> str:
    """A width's coverage in plain words (the terms of docs/results.md, "Proof coverage of one width")."""
    q = rec["width"]
    hist, bounds = rec["accept_histogram"], rec["boundaries"]
    if hist is None:
        return f"q={q}: not measurable from the lines the server printed"
    steps = sum(hist)
    full = hist[-1] if hist else 0
    words = [f"q={q}: {steps} verify steps seen, {steps - full} with a rejected draft"]
    if bounds is not None:
        crossed = [f"{bounds[k]['batches']} crossed a {name} ({bounds[k]['rejected']} with a rejection)"
                   for k, name in BOUNDARY_NAMES.items() if bounds[k]["batches"]]
        never = [f"a {name}" for k, name in BOUNDARY_NAMES.items() if not bounds[k]["batches"]]
        words += crossed
        if never:
            words.append("none crossed " + " or ".join(never))
    return "; ".join(words)
