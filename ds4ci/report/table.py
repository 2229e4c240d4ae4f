"""The plain-text verdict table printed at the end of a gate run (terminal, not Markdown)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ds4ci import textsafe
from ds4ci.report.docview import DocView
from ds4ci.report.docview.build import as_views

_REASON_LINES = 24  # a reason quoting a log tail is bounded (judging.logtail); show all of it
HEADERS = ("width", "token parity", "steps", "matched/offered", "rejected drafts", "full_snap claimed", "verdict")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _view(doc: DocView | Mapping[str, Any]) -> DocView:
    return as_views([doc], read_vocab=False)[0]


def rows(doc: DocView | Mapping[str, Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for width in _view(doc).width_lines:
        cells = width.cells
        if not cells:
            out.append((f"q={width.q}", "-", "-", "-", "-", "-", width.verdict))
            continue
        for cell in cells:
            label = f"q={width.q}" + (f" p{cell.prompt_index}" if len(cells) > 1 else "")
            parity = f"{cell.parity_requests}/{cell.requests}"
            ratio = "-" if cell.span is None else f"{cell.span}/{cell.offered}"
            out.append((label, parity, _cell(cell.steps), ratio, _cell(cell.rejected), _cell(cell.full_snap),
                        cell.verdict))
    return out


def render(doc: DocView | Mapping[str, Any]) -> str:
    """The verdict table of one runner's view (a validated document is viewed first)."""
    view = _view(doc)
    body = rows(view)
    headers = (HEADERS[0], view.parity_column, *HEADERS[2:])
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    scope = view.scope
    parts = ["scope: " + scope.strip(" ()")] if scope else []
    parts += [line(headers), "-+-".join("-" * w for w in widths)]
    parts += [line(r) for r in body]
    parts += list(view.coverage_lines)
    parts.append("")
    parts.append(f"target-only: {view.target_only}; runner {view.name}: {view.verdict.upper()}{scope}")
    if view.tree is not None:
        parts.append(f"  - {view.tree}")
    reasons = view.all_reasons
    for reason in reasons[:20]:
        lines = textsafe.lines(reason.rstrip("\n"))
        parts.append(f"  - {lines[0]}")
        parts.extend(f"      {extra}" for extra in lines[1:_REASON_LINES])
        if len(lines) > _REASON_LINES:
            parts.append(f"      ... ({len(lines) - _REASON_LINES} more lines in results.json)")
    if len(reasons) > 20:
        parts.append(f"  ... {len(reasons) - 20} more reason(s) in results.json")
    for warning in view.warnings[:20]:
        parts.append(f"  warning: {textsafe.lines(warning)[0]}")
    parts.append(f"evidence: {view.evidence_dir}")
    return textsafe.neutralise("\n".join(parts))  # cells and reasons hold server and pull-request text
