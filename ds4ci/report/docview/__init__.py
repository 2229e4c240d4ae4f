"""One view per runner, computed once from its results document (:class:`DocView`, built by :func:`view_of`).

Small modules with one job each: ``load`` reads the documents, ``words`` and ``figures`` say what a document
says, ``difference`` finds the first differing token and its text, ``places`` the failing lines in the PR's
files, ``judged`` the status a document earns, ``build`` assembles the view, ``compare`` sets it beside the base
branch's result and ``headline`` says the pull request's result in one line. Nothing outside this package under
``ds4ci.report`` or ``ds4ci.github`` reads a results document.
"""

from __future__ import annotations

from ds4ci.report.docview.build import DocView, view_of, with_warning
from ds4ci.report.docview.words import REASON_CHARS, first_line, fmt_int, sum_or_none

__all__ = ["REASON_CHARS", "DocView", "first_line", "fmt_int", "sum_or_none", "view_of", "with_warning"]
