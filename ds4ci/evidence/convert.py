"""Every results.json schema version this ds4ci reads, converted to today's shape here and nowhere else.

Evidence outlives the ds4ci that sealed it. A results document records its ``schema_version``
(an integer; ``docs/results.md`` has the changelog); documents sealed before the number existed
are read by their shape:

- schema 1 (sealed before 2026-12-03): each width's prompt says ``banner`` and ``full_snap`` (the
  server's claims) and has no ``rejected_drafts``; each coverage boundary says ``rolled_back``;
- schema 2 (2026-12-03 until the number existed): ``banner_claimed``, ``full_snap_claimed``,
  ``rejected_drafts``, ``rejected_at_boundary``;
- schema 3 (today): ``schema_version`` itself, and each prompt's ``matched_min`` / ``matched_max``
  (the range of matched counts the evidence allows).

``to_current`` turns any of them into today's shape (each step renames or computes a field from
what the older document holds, never a default a reader could mistake for a measurement); a
version outside 1..CURRENT is refused with ``UnreadableSchema``, which names the ds4ci to install.
Report, publish, merge-check and verify read every document through ``results.loads``, which calls
this module: no template or reader needs to know an older shape.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from ds4ci.errors import ResultsError

CURRENT: Final = 3
OLDEST: Final = 1
# Top-level results fields that are judged (re-derived with today's rules) rather than copied from a
# sealed file: across schema versions these may differ (a finding); every other field must agree.
JUDGED: Final = frozenset({
    "verdict", "reasons", "exit_code", "target_only", "widths", "checks", "build", "errors", "warnings", "evidence",
})
_VERSION_TEXT = re.compile(r"^[0-9]+(\.[0-9]+){0,3}([a-z]+[0-9]*)?(\.[a-z]+[0-9]*)?$")
_V1_PROMPT = ("banner", "full_snap")


class UnreadableSchema(ResultsError):
    """A results document of a schema version this ds4ci cannot read (older than OLDEST or newer than CURRENT)."""

    def __init__(self, message: str, version: int, sealed_by: str | None) -> None:
        super().__init__(message)
        self.version = version
        self.sealed_by = sealed_by  # the ds4ci version the document names, when it is a plain version string


def sealed_by(doc: dict[str, Any]) -> str | None:
    """The ds4ci version a document says sealed it, when it is a plain version string (else None: not shown)."""
    value = doc.get("ds4ci_version")
    return value if isinstance(value, str) and len(value) <= 40 and _VERSION_TEXT.match(value) else None


# ds4ci is installed from a tag of its repository, not from a package index (docs/install.md); OWNER/ds4ci is the
# docs' one placeholder, wherever that repository lives. The one place the line is written.
INSTALL_FROM_TAG = "pip install 'ds4ci @ git+https://github.com/OWNER/ds4ci@v{version}'"


def install_hint(version: str | None) -> str:
    """What to install to read a document sealed by ds4ci ``version``: the line that installs its release tag."""
    if version is None:
        return "the ds4ci that sealed it (its version is not recorded as a plain version string)"
    return f"`{INSTALL_FROM_TAG.format(version=version)}` (OWNER/ds4ci: ds4ci's repository, docs/install.md)"


def _prompts(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    widths = doc.get("widths")
    for width in widths if isinstance(widths, list) else ():
        prompts = width.get("prompts") if isinstance(width, dict) else None
        yield from (p for p in (prompts if isinstance(prompts, list) else ()) if isinstance(p, dict))


def _boundaries(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    widths = doc.get("widths")
    for width in widths if isinstance(widths, list) else ():
        coverage = width.get("coverage") if isinstance(width, dict) else None
        bounds = coverage.get("boundaries") if isinstance(coverage, dict) else None
        yield from (b for b in (bounds.values() if isinstance(bounds, dict) else ()) if isinstance(b, dict))


def sealed_version(doc: dict[str, Any], source: str) -> int:
    """The schema version a results document was sealed with: its ``schema_version``, or its shape (1 or 2)."""
    if "schema_version" in doc:
        value = doc["schema_version"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ResultsError(f"{source}: expected schema_version to be a positive integer, found {value!r}")
        return value
    old = any(k in p for p in _prompts(doc) for k in _V1_PROMPT) or any("rolled_back" in b for b in _boundaries(doc))
    new = any("banner_claimed" in p for p in _prompts(doc)) or any("rejected_at_boundary" in b for b in _boundaries(doc))
    if old and new:
        raise ResultsError(f"{source}: expected one schema's field names, found both schema 1's (banner, full_snap, "
                           "rolled_back) and schema 2's (banner_claimed, full_snap_claimed, rejected_at_boundary)")
    return 1 if old else 2


def _rename(record: dict[str, Any], old: str, new: str) -> None:
    if old in record and new not in record:
        record[new] = record.pop(old)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_1(doc: dict[str, Any]) -> None:
    """Schema 1 -> 2: the server's claims renamed; rejected drafts computed from the counters it recorded."""
    for prompt in _prompts(doc):
        _rename(prompt, "banner", "banner_claimed")
        _rename(prompt, "full_snap", "full_snap_claimed")
        matched, offered = _count(prompt.get("matched")), _count(prompt.get("offered"))
        prompt.setdefault("rejected_drafts", offered - matched if matched is not None and offered is not None else None)
    for bound in _boundaries(doc):
        _rename(bound, "rolled_back", "rejected_at_boundary")


def _from_2(doc: dict[str, Any]) -> None:
    """Schema 2 -> 3: the version recorded; an exact matched count is its own range."""
    for prompt in _prompts(doc):
        prompt.setdefault("matched_min", prompt.get("matched"))
        prompt.setdefault("matched_max", prompt.get("matched"))
    doc["schema_version"] = 3


_STEPS: Final[dict[int, Callable[[dict[str, Any]], None]]] = {1: _from_1, 2: _from_2}


def unreadable(version: int, by: str | None, what: str) -> str:
    """Why this ds4ci cannot read ``what`` of schema ``version``, and what to install instead."""
    age = "newer" if version > CURRENT else "older"
    return (f"{what} has schema {version}, {age} than this ds4ci reads (schemas {OLDEST}..{CURRENT}); "
            f"it was sealed by ds4ci {by or '(version not recorded)'}: verify it with {install_hint(by)}")


def to_current(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of ``doc`` in today's shape (``doc`` itself when it is today's already)."""
    version = sealed_version(doc, source)
    if not OLDEST <= version <= CURRENT:
        raise UnreadableSchema(unreadable(version, sealed_by(doc), source), version, sealed_by(doc))
    if version == CURRENT:
        return doc
    out = copy.deepcopy(doc)
    for step in range(version, CURRENT):
        _STEPS[step](out)
    return out
