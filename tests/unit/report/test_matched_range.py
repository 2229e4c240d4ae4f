"""A counterless summary that allows a range of matched counts is shown as that range, never as unknown."""

from __future__ import annotations

from typing import Any, cast

from paths import TESTS

from ds4ci.evidence import results
from ds4ci.records import Results
from ds4ci.report import render, table


def _with_range() -> Results:
    doc = cast(dict[str, Any], results.load(TESTS / "data" / "results" / "pass.json"))
    cell = doc["widths"][0]["prompts"][0]  # q=2: 112 steps, 79..80 matched (the 41ee7d0 run at 192 tokens)
    cell.update(matched=None, matched_min=79, matched_max=80, offered=112, steps=112, rejected_drafts=32,
                counters="derived")
    return results.validate(doc)


def test_the_terminal_table_and_the_comment_show_the_range() -> None:
    doc = _with_range()
    assert "79..80/112" in table.render(doc)
    body, _ = render.render([doc], kind="summary")
    assert "79..80/112" in body and "—/112" not in body
