"""Where a failing build or check points in the pull request's own files: its ``path:line`` errors.

A ``path:line`` that a failing build or check printed (GCC/Clang ``error:``, GoogleTest ``Failure``, a Python
traceback's ``Error``), relative to the checkout (the build's working directory, where the checks run by
default) and never outside it. The check run sends them as annotations; the comment links the first.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ds4ci.report import markdown

MAX_ANNOTATIONS = 50  # per request; ds4ci sends one request per check run
_LOCATION = re.compile(
    r"^(?P<path>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? ?"
    r"(?P<what>(?:fatal )?error\b|Failure\b|[A-Z][A-Za-z]*Error\b)(?P<rest>.*)$"
)


@dataclass(frozen=True)
class Annotation:
    path: str  # relative to the repository root
    line: int
    message: str
    title: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "start_line": self.line, "end_line": self.line, "annotation_level": "failure",
                "message": self.message, "title": self.title}


def _inside(path: str, root: str | None) -> str | None:
    """``path`` as a repository path: relative to ``root`` when absolute; None when it leaves the checkout."""
    if path.startswith("/"):
        if not root or not root.startswith("/"):
            return None
        rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(root))
    else:
        rel = posixpath.normpath(path)
    if rel in (".", "") or rel.startswith("../") or rel == ".." or rel.startswith("/"):
        return None
    return rel


def locations(log: str, root: str | None, source: str) -> list[Annotation]:
    """The ``path:line`` errors in one log tail that point inside the checkout, each place once."""
    out: list[Annotation] = []
    seen: set[tuple[str, int]] = set()
    for raw in log.splitlines():
        match = _LOCATION.match(markdown.clean(raw).strip())
        if match is None:
            continue
        path = _inside(match.group("path"), root)
        line = int(match.group("line"))
        if path is None or line < 1 or (path, line) in seen:
            continue
        seen.add((path, line))
        message = (match.group("what") + match.group("rest")).strip()
        out.append(Annotation(path, line, message[:1000], f"{source}: {match.group('what')}"[:255]))
    return out


def find(failed_logs: Sequence[tuple[str, str]], root: str | None) -> tuple[tuple[Annotation, ...], int]:
    """(annotations to send, how many more were found) from the failing build's and checks' log tails."""
    found: list[Annotation] = []
    for source, log in failed_logs:
        found += locations(log, root, source)
    unique = list({(a.path, a.line): a for a in found}.values())
    return tuple(unique[:MAX_ANNOTATIONS]), max(len(unique) - MAX_ANNOTATIONS, 0)
