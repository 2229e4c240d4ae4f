"""The sticky comment's section protocol: markers, :class:`Section`, parsing and merging.

Runners finishing at different times share one comment: each runner's part is a
:class:`Section` wrapped in HTML-comment markers that carry its identity (runner, role, state,
head, results digest). A publisher for one runner parses the sections of the existing comment
(:func:`parse_sections`), replaces its own and keeps the others (:func:`merge_sections`).
Rendering a section's body is :mod:`ds4ci.report.render`'s job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ds4ci.report.markdown import Trusted

MARKER = "<!-- ds4ci:sticky-comment -->"
STATES = ("pass", "fail", "error", "not_run", "pending", "unverified")
UNVERIFIED = "unverified"  # a result no bundle backs (e.g. a fork's artifact): shown, never as a pass
# A bisect's result (``ds4ci bisect``): a section of its own beside the runner's gate section, never a status.
BISECT = "bisect"

_RUNNER_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
_SECTION_RE = re.compile(
    r"^<!-- ds4ci:section v=1 runner=(?P<runner>" + _RUNNER_RE + r") role=(?P<role>gate|negative-control|bisect)"
    r" state=(?P<state>pass|fail|error|not_run|pending|unverified) head=(?P<head>[0-9a-f]{40}|none)"
    r" digest=(?P<digest>[0-9a-f]{64}|none) -->\n(?:<!-- ds4ci:why (?P<why>[^<>\n]{1,2000}) -->\n)?"
    r"(?P<body>.*?)\n<!-- ds4ci:section-end runner=(?P=runner) -->$",
    re.MULTILINE | re.DOTALL,
)


_WHY_RE = re.compile(r"^[^<>\n]{1,2000}$")


@dataclass(frozen=True)
class Section:
    """One runner's rendered part of the comment plus the identity carried in its marker."""

    runner: str
    role: str
    state: str
    head: str | None
    digest: str | None
    body: str
    # The one-line reason for the comment's top table: escaped Markdown text (no "<", ">" or newline),
    # carried in its own hidden line so that a section kept from an earlier comment keeps it too.
    why: Trusted | None = None

    def text(self) -> Trusted:
        meta = (
            f"<!-- ds4ci:section v=1 runner={self.runner} role={self.role} state={self.state} "
            f"head={self.head or 'none'} digest={self.digest or 'none'} -->"
        )
        if self.why and _WHY_RE.match(self.why):
            meta += f"\n<!-- ds4ci:why {self.why} -->"
        return Trusted(f"{meta}\n{self.body}\n<!-- ds4ci:section-end runner={self.runner} -->")


def parse_sections(body: str) -> list[Section]:
    """The runner sections embedded in one of our comments (malformed ones are ignored)."""
    if not body.startswith(MARKER):
        return []
    sections = []
    for match in _SECTION_RE.finditer(body):
        head = match.group("head")
        digest = match.group("digest")
        sections.append(
            Section(
                runner=match.group("runner"),
                role=match.group("role"),
                state=match.group("state"),
                head=None if head == "none" else head,
                digest=None if digest == "none" else digest,
                body=match.group("body"),
                why=Trusted(match.group("why")) if match.group("why") else None,
            )
        )
    return sections


def merge_sections(ours: Sequence[Section], existing: Iterable[Section]) -> list[Section]:
    """Our sections replace same-runner ones; every other runner's section is kept (first wins). A runner's
    bisect section and its gate section are two (each replaces only its own kind).

    An unverified section never replaces one that a verified run wrote for the same runner.
    """
    existing = list(existing)
    trusted = {_key(s) for s in existing if s.state != UNVERIFIED}
    merged: dict[tuple[str, bool], Section] = {
        _key(s): s for s in ours if not (s.state == UNVERIFIED and _key(s) in trusted)}
    for section in existing:
        merged.setdefault(_key(section), section)
    return order_sections(merged.values())


def _key(section: Section) -> tuple[str, bool]:
    return section.runner, section.role == BISECT


def order_sections(sections: Iterable[Section]) -> list[Section]:
    # A stable order keeps an unchanged comment byte-identical (no needless edit).
    # Failures first: what needs the reader comes before what passed.
    return sorted(sections, key=lambda s: (s.role != "gate", STATE_ORDER.get(s.state, 1), s.runner))


STATE_ORDER = {"fail": 0, "error": 0, UNVERIFIED: 1, "pending": 2, "not_run": 3, "pass": 4}
