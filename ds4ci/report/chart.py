"""A small picture GitHub draws: drafts accepted per width, this head's against the base's, as a Mermaid chart.

GitHub renders a fenced ``mermaid`` block in comments, check runs and job summaries; every value here is a
number or a width we format ourselves, so nothing a results file says reaches the chart's text.
"""

from __future__ import annotations

from ds4ci.report.docview.compare import Comparison
from ds4ci.report.markdown import Trusted


def _percent(value: float | None) -> str:
    return "0" if value is None else f"{value * 100:.1f}".rstrip("0").rstrip(".")


def acceptance(against: Comparison) -> Trusted | None:
    """Bars: this head's accepted-of-offered per width; a line: the base's. None where no width has both numbers."""
    rows = [r for r in against.rows if r.here is not None and r.here.acceptance is not None]
    if not rows or not any(r.base is not None and r.base.acceptance is not None for r in rows):
        return None
    labels = ", ".join(f'"q={r.q}"' for r in rows)
    lines = ["```mermaid", '%%{init: {"xyChart": {"width": 520, "height": 260}}}%%', "xychart-beta",
             '    title "Drafts accepted (%): bars this head, line the base"',
             f"    x-axis [{labels}]", '    y-axis "accepted of offered (%)" 0 --> 100',
             f"    bar [{', '.join(_percent(r.here.acceptance if r.here else None) for r in rows)}]"]
    base = [r.base.acceptance if r.base is not None else None for r in rows]
    lines.append(f"    line [{', '.join(_percent(b) for b in base)}]")
    lines.append("```")
    return Trusted("\n".join(lines))
