"""Reading GitHub's JSON answers: every field checked for its type, a message naming what was wrong.

Shared by merge-check's facts (``mergefacts``) and the publisher's history walk (``publish``), which
both read the check runs of a commit.
"""

from __future__ import annotations

from typing import Any

from ds4ci.errors import PublishError
from ds4ci.github import merge


def bad(what: str, expected: str, found: Any) -> PublishError:
    return PublishError(f"GitHub's answer for {what}: expected {expected}, found {found!r:.200}")


def get(doc: Any, key: str, kind: type | tuple[type, ...], what: str, *, nullable: bool = False) -> Any:
    if not isinstance(doc, dict):
        raise bad(what, "a JSON object", doc)
    value = doc.get(key)
    if value is None and nullable:
        return None
    if isinstance(value, bool) and kind is int:
        raise bad(f"{what} ({key})", "an integer", value)
    if not isinstance(value, kind):
        raise bad(f"{what} ({key})", getattr(kind, "__name__", str(kind)), value)
    return value


def check_runs(items: list[Any], sha: str) -> tuple[merge.CheckRun, ...]:
    what = f"the check runs of {sha[:12]}"
    return tuple(
        merge.CheckRun(
            name=get(item, "name", str, what),
            status=get(item, "status", str, what),
            conclusion=get(item, "conclusion", str, what, nullable=True),
            head_sha=get(item, "head_sha", str, what),
            app=get(get(item, "app", dict, what, nullable=True) or {"slug": "(no app)"}, "slug", str, what),
            app_id=get(get(item, "app", dict, what, nullable=True) or {"id": 0}, "id", int, what),
            details_url=str(get(item, "details_url", str, what, nullable=True) or ""),
            id=get(item, "id", int, what),
            title=str(get(get(item, "output", dict, what, nullable=True) or {}, "title", str, what, nullable=True)
                      or ""),
            summary=str(get(get(item, "output", dict, what, nullable=True) or {}, "summary", str, what, nullable=True)
                        or ""),
        )
        for item in items
    )
