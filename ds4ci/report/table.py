"""The plain-text verdict table printed at the end of a gate run (terminal, not Markdown)."""

from __future__ import annotations

from ds4ci import textsafe
from ds4ci.gate.settings import scope_note
from ds4ci.judging.coverage import compact_line
from ds4ci.judging.tree import tree_line
from ds4ci.records import Results
from ds4ci.report.docview.figures import matched_span
from ds4ci.report.docview.words import parity_column, target_only_words

_REASON_LINES = 24  # a reason quoting a log tail is bounded (judging.logtail); show all of it
HEADERS = ("width", "token parity", "steps", "matched/offered", "rejected drafts", "full_snap claimed", "verdict")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def rows(doc: Results) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for width in doc["widths"]:
        cells = width["prompts"]
        if not cells:
            out.append((f"q={width['q']}", "-", "-", "-", "-", "-", width["verdict"]))
            continue
        for cell in cells:
            label = f"q={width['q']}" + (f" p{cell['prompt_index']}" if len(cells) > 1 else "")
            parity = f"{cell['parity_requests']}/{cell['requests']}"
            span = matched_span([cell])
            ratio = "-" if span is None else f"{span}/{cell['offered']}"
            out.append((
                label, parity, _cell(cell["steps"]), ratio, _cell(cell["rejected_drafts"]),
                _cell(cell["full_snap_claimed"]), cell["verdict"],
            ))
    return out


def render(doc: Results) -> str:
    body = rows(doc)
    headers = (HEADERS[0], parity_column(doc), *HEADERS[2:])
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    scope = scope_note(doc["settings"])
    parts = ["scope: " + scope.strip(" ()")] if scope else []
    parts += [line(headers), "-+-".join("-" * w for w in widths)]
    parts += [line(r) for r in body]
    parts += [compact_line(w["coverage"]) for w in doc["widths"] if "coverage" in w]
    parts.append("")
    parts.append(f"target-only: {target_only_words(doc)}; runner {doc['runner']['name']}: {doc['verdict'].upper()}{scope}")
    tree = tree_line(doc["revisions"], doc["settings"], doc["reasons"])
    if tree is not None:
        parts.append(f"  - {tree}")
    for reason in doc["reasons"][:20]:
        lines = textsafe.lines(reason.rstrip("\n"))
        parts.append(f"  - {lines[0]}")
        parts.extend(f"      {extra}" for extra in lines[1:_REASON_LINES])
        if len(lines) > _REASON_LINES:
            parts.append(f"      ... ({len(lines) - _REASON_LINES} more lines in results.json)")
    if len(doc["reasons"]) > 20:
        parts.append(f"  ... {len(doc['reasons']) - 20} more reason(s) in results.json")
    for warning in doc.get("warnings", [])[:20]:
        parts.append(f"  warning: {textsafe.lines(warning)[0]}")
    parts.append(f"evidence: {doc['evidence']['dir']}")
    return textsafe.neutralise("\n".join(parts))  # cells and reasons hold server and pull-request text
