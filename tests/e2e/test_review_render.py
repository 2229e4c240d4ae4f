"""The golden review comments in a real browser (headless Chromium): what a reviewer sees with every fold closed.

Each comment is rendered as GitHub renders Markdown (markdown-it with tables, raw HTML for <details>, soft line
breaks), then read back from the page: the visible text (``innerText``, which leaves out what a closed <details>
holds) starts with the headline and uses no word of the gate's own jargon; a failing runner shows its follow-up and
reproduce command; the screenshot is a real PNG of the page's width. With ``DS4CI_MERMAID_JS`` naming a
mermaid.min.js (npm's mermaid package ships one), the acceptance chart is drawn too and must come out as an SVG.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import struct
from pathlib import Path

import pytest
from render_screenshot import screenshot, to_html, visible_dom
from reviewcases import CASES, comment

JARGON = ("oracle", "compressor", "countered-summary", "summary-plain", "ratio-4", "ratio4", "full_snap")
WIDTH = 960
_VISIBLE = re.compile(r'<pre id="ds4ci-visible" style="display: none;">(.*?)</pre>', re.DOTALL)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is no PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium (apt-get install chromium)")
def test_every_review_comment_reads_right_in_a_browser(tmp_path: Path) -> None:
    mermaid = Path(os.environ["DS4CI_MERMAID_JS"]) if os.environ.get("DS4CI_MERMAID_JS") else None
    for case in sorted(CASES):
        body = comment(case)
        page = tmp_path / f"{case}.html"
        page.write_text(to_html(body, "github-actions commented", mermaid), encoding="utf-8")
        dom = visible_dom(page)
        found = _VISIBLE.search(dom)
        assert found is not None, f"{case}: the page's script did not run"
        lines = [line.strip() for line in found.group(1).splitlines() if line.strip()]
        headline = html.unescape(body.splitlines()[2].strip("*"))
        assert lines[1:3] == ["ds4ci reference-exact parity gate", headline], (case, lines[:3])  # then the table
        visible = "\n".join(lines).lower()
        for word in JARGON:
            assert word not in visible, (case, word)
        if "blocked" in headline:
            assert "reproduce on the runner" in visible and "git checkout" in visible, case
        if mermaid is not None and "xychart-beta" in body:
            assert 'aria-roledescription="xychart"' in dom, f"{case}: the chart was not drawn"
        png = tmp_path / f"{case}.png"
        screenshot(page, png, WIDTH, 1200)
        assert _png_size(png) == (WIDTH, 1200), case
