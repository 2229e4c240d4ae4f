"""A runner's numbers: the per-width table, drafts accepted of those offered, and how long the gate took.

Pure functions of a validated results document; only the view builder (:mod:`ds4ci.report.docview.build`)
calls them. Every count is one the evidence derivation (``ds4ci.evidence.derive``) recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.judging.coverage import compact_line
from ds4ci.records import PromptResult, Results
from ds4ci.report.docview.words import fmt_int, sum_or_none


@dataclass(frozen=True)
class WidthFigures:
    """One width's acceptance (drafts accepted of those offered) and how long its server ran."""

    q: int
    verdict: str
    matched: int | None  # the fewest accepted drafts the evidence allows (None: no counters)
    offered: int | None
    run_s: float | None  # wall-clock seconds its requests took (None: not recorded)

    @property
    def acceptance(self) -> float | None:
        """Accepted of offered, 0..1 (None without counters or offers)."""
        if self.matched is None or not self.offered:
            return None
        return self.matched / self.offered

    def to_json(self) -> dict[str, Any]:
        return {"q": self.q, "verdict": self.verdict, "matched": self.matched, "offered": self.offered,
                "run_s": self.run_s}


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


def width_figures(doc: Results) -> tuple[WidthFigures, ...]:
    """Per width: accepted (the safe bound, ``matched_min``) and offered drafts, and its server's run time."""
    runs = {t["q"]: t["run_s"] for t in doc["timings"]["servers"] if t["arm"] != "target-only" and t["q"] is not None}
    out = []
    for width in doc["widths"]:
        prompts = width["prompts"]
        matched = sum_or_none(p["matched_min"] for p in prompts) if prompts else None
        offered = sum_or_none(p["offered"] for p in prompts) if prompts else None
        out.append(WidthFigures(width["q"], width["verdict"], matched, offered, runs.get(width["q"])))
    return tuple(out)


def gate_seconds(doc: Results) -> float:
    """The whole gate's wall-clock seconds (``timings.total_s``)."""
    return float(doc["timings"]["total_s"])


def claimed(value: object) -> str:
    """A server's claim in the report's words: it claimed it, it did not, or nothing was read (``None``)."""
    return "—" if value is None else ("claimed" if value else "not claimed")


def gate_rows(doc: Results) -> list[dict[str, Any]]:
    rows = []
    for width in doc["widths"]:
        prompts = width["prompts"]
        snaps = [p["full_snap_claimed"] for p in prompts]
        unknown = not prompts or any(s is None for s in snaps)
        full_snap = claimed(None if unknown else all(snaps))
        offered = sum_or_none(p["offered"] for p in prompts) if prompts else None
        rows.append(
            {
                "q": width["q"],
                "verdict": width["verdict"],
                "parity": f"{sum(p['parity_requests'] for p in prompts)}/{sum(p['requests'] for p in prompts)}",
                "steps": fmt_int(sum_or_none(p["steps"] for p in prompts) if prompts else None),
                "matched_offered": f"{matched_span(prompts) or fmt_int(None)}/{fmt_int(offered)}",
                "rejected": fmt_int(sum_or_none(p["rejected_drafts"] for p in prompts) if prompts else None),
                "full_snap": full_snap,
                "tokens": "/".join(
                    [fmt_int(sum_or_none(p["tokens_target"] for p in prompts) if prompts else None),
                     fmt_int(sum_or_none(p["tokens_spec"] for p in prompts) if prompts else None)]
                ),
                "repeats_identical": all(p["repeats_identical"] for p in prompts) if prompts else None,
                "counters_identical": all(p["counters_identical"] for p in prompts) if prompts else None,
                "coverage": compact_line(width["coverage"]) if "coverage" in width else None,
            }
        )
    return rows


def prompt_rows(doc: Results) -> list[dict[str, Any]]:
    """Per width and prompt: the folded per-prompt table (shown where a width has more than one prompt)."""
    return [{"q": w["q"], "prompt_index": p["prompt_index"], "parity": f"{p['parity_requests']}/{p['requests']}",
             "steps": fmt_int(p["steps"]), "matched_offered": f"{matched_span([p]) or fmt_int(None)}/{fmt_int(p['offered'])}",
             "rejected": fmt_int(p["rejected_drafts"]), "full_snap": claimed(p["full_snap_claimed"]),
             "verdict": p["verdict"]}
            for w in doc["widths"] for p in w["prompts"]]
