"""One view of each runner's verified document, computed once, that every published form reads.

The commit status (state, description), the check run (conclusion, title) and the comment and job summary
(the document shown, with the focused-rerun decision among its warnings) all come from the same
:class:`RunnerView`: nothing downstream decides a runner's state or words again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ds4ci.github import publish
from ds4ci.github.verified import Published
from ds4ci.records import Results
from ds4ci.report.docview import DocView, view_of
from ds4ci.report.sections import results_digest


@dataclass(frozen=True)
class RunnerView:
    """What ds4ci says about one runner on one head."""

    doc: Results  # the document as shown (a focused rerun's decision first among its warnings)
    words: DocView  # its head, headline, claims versus tested, coverage words and digest, computed once
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


def is_focused(doc: Results) -> bool:
    """A focused rerun (``[gate] scope = "focused"``): green only on top of a full pass, where allowed."""
    return doc["settings"].get("scope") == "focused"


def view(item: Published, head: str, *, full_pass: str | None, allow_focused: bool) -> RunnerView:
    """The view of one document; ``full_pass``: the ancestor with the publisher's full pass (focused reruns)."""
    doc = item.doc
    words = view_of(doc)
    decided = publish.decide(doc, head, None, words)
    if is_focused(doc) and item.may_set_status:
        decided = publish.focused_plan(decided, doc, full_pass, allow_focused)
        note = f"focused rerun: status {decided.state}: {decided.description}"
        doc = {**doc, "warnings": [note, *doc.get("warnings", [])]}
        # The decision is among the warnings the comment shows: the document it shows has its own digest (the
        # headline, the claims and the coverage words do not read the warnings).
        words = replace(words, digest=results_digest(doc))
    return RunnerView(doc=doc, words=words, name=doc["runner"]["name"], role=doc["runner"]["role"], head=head,
                      state=decided.state, description=decided.description, may_set_status=item.may_set_status,
                      signature=item.signature)


def views_of(published: Sequence[Published], head: str, full_passes: Mapping[str, str | None],
             allow_focused: bool) -> list[RunnerView]:
    return [view(p, head, full_pass=full_passes.get(p.doc["runner"]["name"]), allow_focused=allow_focused)
            for p in published]
