"""What the comment says at a glance: each cause once, and where ds4ci's docs explain the words it uses.

Pure functions of text: the view builder (``ds4ci.report.docview``) groups a document's reasons with them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

_DS4CI_REF = re.compile(r"^([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@([A-Za-z0-9_./-]+)$")


def docs_link(page: str, anchor: str) -> str | None:
    """The page of ds4ci's docs on GitHub, at the ds4ci the workflow runs (``DS4CI_REF``, OWNER/NAME@REF), or None."""
    match = _DS4CI_REF.match(os.environ.get("DS4CI_REF", ""))
    if match is None:
        return None
    return f"https://github.com/{match.group(1)}/blob/{match.group(2)}/docs/{page}#{anchor}"


_PER_WIDTH = re.compile(r"^q=(\d+) (.+)$", re.DOTALL)


def grouped_reasons(reasons: Sequence[str]) -> list[str]:
    """Each cause once: reasons that differ only in their width (``q=2 X``, ``q=3 X``) become ``q=2,3 X``."""
    groups: dict[str, list[str]] = {}
    order: list[str] = []
    for reason in reasons:
        match = _PER_WIDTH.match(reason.strip())
        key = match.group(2) if match else reason
        if key not in groups:
            groups[key] = []
            order.append(key)
        if match:
            groups[key].append(match.group(1))
    return [f"q={','.join(groups[key])} {key}" if groups[key] else key for key in order]


COVERAGE_DOC = ("results.md", "proof-coverage-of-one-width-coverage")
