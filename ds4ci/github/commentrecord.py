"""Which sticky comment is ours: by record where the publisher's login is shared, by login where it is not.

Every workflow's ``GITHUB_TOKEN`` posts as ``github-actions[bot]`` (:data:`SHARED_LOGIN`), so a workflow a pull
request adds can post a comment that starts with the marker, holds any section, and looks exactly like
ds4ci's. Under that login a comment is ours only when a record a pull request cannot write vouches for it:

* its second line names the run that wrote it (``<!-- ds4ci:comment-of-run 123 -->``, :func:`stamp`),
* that run is a run of the trusted gate on the default branch (``vouch.Voucher.run_problem``), and
* that run has an artifact named ``ds4ci-comment-<the comment's id>-<digest of its current body>``
  (:func:`artifact_name`): gate.yml's publish job uploads it once publish wrote the comment (the body as
  GitHub returned it after the write), and only a run's own jobs can upload its artifacts.

A copy of the line in a look-alike names a run whose artifact names another comment. The same token may edit
ds4ci's own comment: the edited body's digest is in no record, so that comment is a look-alike from then on. Another login (a
person's token, a GitHub App of its own) is the publisher's alone: its marked comments are ours by login.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ds4ci.github.client import Comment
from ds4ci.report.sections import MARKER

SHARED_LOGIN = "github-actions[bot]"  # who every workflow's GITHUB_TOKEN posts as
_LINE = "<!-- ds4ci:comment-of-run {run} -->"
_RUN = re.compile(r"<!-- ds4ci:comment-of-run ([1-9][0-9]{0,18}) -->")

# run id -> the names of its artifacts when it is a run of the trusted gate, else None (and why not)
RunRecords = Callable[[int], "tuple[frozenset[str] | None, str]"]


DIGEST_HEX = 32  # the hex digits of the body's SHA-256 an artifact's name carries


def digest(body: str) -> str:
    """The SHA-256 (hex) of ``body``'s UTF-8 bytes."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def artifact_name(comment_id: int, body: str) -> str:
    """The artifact whose name records, in the run that wrote it, that comment ``comment_id`` with exactly the
    text ``body`` is ds4ci's."""
    return f"ds4ci-comment-{comment_id}-{digest(body)[:DIGEST_HEX]}"


def stamp(body: str, run: int | None) -> str:
    """``body`` (the marker first) with the line naming ``run``, the run that vouches for it, after the marker."""
    if run is None or not body.startswith(MARKER):
        return body
    return f"{MARKER}\n{_LINE.format(run=run)}{body[len(MARKER):]}"


def run_of(body: str) -> int | None:
    """The run a comment's second line names (None: no such line)."""
    lines = body.split("\n", 2)
    m = _RUN.fullmatch(lines[1]) if len(lines) > 1 and lines[0] == MARKER else None
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Sorted:
    ours: tuple[Comment, ...]  # ours, oldest first (by record: at most the one)
    run: int | None  # the run whose record vouches for ours[0] (None: by login, or none)
    lookalikes: tuple[tuple[Comment, str], ...]  # marked comments by the login that are not ours, and why


def sort(marked: Sequence[Comment], publisher: str, records: RunRecords) -> Sorted:
    """``marked``: the publisher's marked comments, oldest first. Under a shared login only the oldest one a
    record vouches for is ours; every other is a look-alike, left alone."""
    if publisher != SHARED_LOGIN:
        return Sorted(tuple(marked), None, ())
    ours: Comment | None = None
    run: int | None = None
    others: list[tuple[Comment, str]] = []
    for comment in marked:
        why = _why_not(comment, records)
        if why is None and ours is None:
            ours, run = comment, run_of(comment.body)
        else:
            others.append((comment, why or "an older comment of ds4ci's is the one kept"))
    return Sorted((ours,) if ours is not None else (), run, tuple(others))


def _why_not(comment: Comment, records: RunRecords) -> str | None:
    run = run_of(comment.body)
    if run is None:
        return "it names no run that wrote it"
    names, why = records(run)
    if names is None:
        return f"the run it names is no run of the trusted gate: {why}"
    name = artifact_name(comment.id, comment.body)
    if name in names:
        return None
    if any(n.startswith(f"ds4ci-comment-{comment.id}-") for n in names):
        return (f"run {run} recorded writing this comment, but not its current text ({name}): it was edited "
                "since ds4ci wrote it")
    return f"run {run} has no record ({name}) that it wrote this comment"
