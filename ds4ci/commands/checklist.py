"""The GitHub-side checklist of an adoption (variables, environment, runners and their service, branch
protection, merge queue): written once, in ``checklist.md`` beside this module; ``ds4ci init`` prints it
and docs/adopting.md holds the same text (a test compares the two)."""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).with_name("checklist.md")


def text() -> str:
    """The checklist as Markdown, as docs/adopting.md holds it."""
    return SOURCE.read_text(encoding="utf-8")
