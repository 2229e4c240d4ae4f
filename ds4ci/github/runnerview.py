"""One view of each runner's verified document, computed once, that every published form reads.

The commit status (state, description), the check run (conclusion, title) and the comment and job summary
(the document shown, with the focused-rerun decision among its warnings) all come from the same
:class:`RunnerView`: nothing downstream decides a runner's state or words again, and nothing reads the document
(its :class:`~ds4ci.report.docview.DocView` says everything).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ds4ci.github import publish
from ds4ci.github.verified import Published
from ds4ci.report.docview import DocView, view_of, with_warning


@dataclass(frozen=True)
class RunnerView:
    """What ds4ci says about one runner on one head."""

    words: DocView  # the document's view as shown (a focused rerun's decision first among its warnings)
    name: str
    role: str
    head: str
    state: str  # the commit status: success | failure | error | pending (a focused pass the policy holds back)
    description: str  # the status description (at most 140 characters)
    may_set_status: bool  # verified: gets a status and a check run; else shown in the comment only
    signature: str

    @property
    def context(self) -> str:
        return f"ds4ci/{self.name}"


def is_focused(view: DocView) -> bool:
    """A focused rerun (``[gate] scope = "focused"``): green only on top of a full pass, where allowed."""
    return view.focused


def viewed(published: Sequence[Published]) -> list[tuple[Published, DocView]]:
    """Each verified document with its view: the one place publishing enters a document."""
    return [(p, view_of(p.doc)) for p in published]


def view(item: Published, head: str, *, full_pass: str | None, allow_focused: bool,
         words: DocView | None = None) -> RunnerView:
    """The view of one document; ``full_pass``: the ancestor with the publisher's full pass (focused reruns)."""
    words = words if words is not None else view_of(item.doc)
    decided = publish.decide(words, head, None)
    if words.focused and item.may_set_status:
        decided = publish.focused_plan(decided, words, full_pass, allow_focused)
        words = with_warning(words, f"focused rerun: status {decided.state}: {decided.description}")
    return RunnerView(words=words, name=words.name, role=words.role, head=head, state=decided.state,
                      description=decided.description, may_set_status=item.may_set_status, signature=item.signature)


def views_of(published: Sequence[tuple[Published, DocView]], head: str, full_passes: Mapping[str, str | None],
             allow_focused: bool) -> list[RunnerView]:
    return [view(p, head, full_pass=full_passes.get(w.name), allow_focused=allow_focused, words=w)
            for p, w in published]
