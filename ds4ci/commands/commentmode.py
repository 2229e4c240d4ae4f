"""When ``ds4ci publish`` writes the sticky comment: ``--comment-mode``, else ``[publish] comment_mode`` of the
trusted config (``--expect-config``), else ``always`` (``options.table``: the modes and their meaning).
``--no-comment`` is ``off``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ds4ci.errors import UsageError
from ds4ci.options import table

if TYPE_CHECKING:
    from ds4ci.report.docview import DocView

OFF, FAILURES = "off", "failures"


def resolve(flag: str | None, no_comment: bool, expect_config: Path | None) -> str:
    option = table.get("publish", "comment_mode")
    assert option.check is not None
    if flag is not None:
        mode = str(option.check(flag, "--comment-mode"))
        if no_comment and mode != OFF:
            raise UsageError(f"--no-comment and --comment-mode {mode} disagree; keep one (--no-comment is "
                             "--comment-mode off)")
        return mode
    if no_comment:
        return OFF
    if expect_config is None:
        return str(option.default)
    from ds4ci.options.sections import read_section

    return str(read_section(expect_config, "publish").get("comment_mode", option.default))


def update_only(mode: str, docs: Sequence[DocView]) -> bool:
    """With ``failures`` and every runner's status success: no new comment (one that exists is still updated)."""
    from ds4ci.github.publish import status_state

    return mode == FAILURES and all(status_state(doc) == "success" for doc in docs)
