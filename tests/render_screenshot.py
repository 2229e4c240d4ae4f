"""Render a ds4ci Markdown comment (or check-run summary) to HTML and screenshot it with headless Chromium.

A documentation tool, not a test: it shows what a maintainer sees, for docs/reporting.md. GitHub's own
renderer is not available offline; markdown-it-py (installed with rich) with tables, raw HTML for
``<details>`` and GitHub's soft line breaks is close enough to judge layout and length.

    python tests/render_screenshot.py tests/golden/fail.md docs/img/comment-fail.png [--width 900]
    python tests/render_screenshot.py --check-run tests/data/results/fail.json docs/img/check-run-fail.png
    python tests/render_screenshot.py --mermaid node_modules/mermaid/dist/mermaid.min.js tests/golden/review-fail-new.md \
        docs/img/review-fail-new.png

Needs ``apt-get install chromium fonts-noto-color-emoji`` (without the emoji font the verdict marks are boxes).

``--check-run RESULTS.json`` renders what ``ds4ci publish`` sends as that runner's check run (title,
conclusion, summary and text) instead of a Markdown file.
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CSS = """
body { font-family: -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; font-size: 14px;
       line-height: 1.5; color: #1f2328; margin: 0; padding: 16px 24px; background: #fff; }
.box { border: 1px solid #d1d9e0; border-radius: 6px; padding: 8px 16px; }
.bar { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; margin: -8px -16px 8px; padding: 8px 16px;
       font-size: 13px; color: #59636e; }
h2 { font-size: 1.4em; border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; margin: .6em 0 .6em; }
h3 { font-size: 1.15em; margin: 1.2em 0 .5em; }
table { border-collapse: collapse; margin: 8px 0; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 4px 10px; }
tr:nth-child(2n) { background: #f6f8fa; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 85%; background: #eff1f3;
       padding: .15em .35em; border-radius: 4px; }
pre { background: #f6f8fa; padding: 12px; border-radius: 6px; overflow: auto; font-size: 85%; }
pre code { background: none; padding: 0; }
details { margin: 6px 0; } summary { cursor: pointer; color: #0969da; }
a { color: #0969da; text-decoration: none; } sub { color: #59636e; } blockquote { color: #59636e;
border-left: .25em solid #d1d9e0; margin: 0; padding: 0 1em; } p { margin: 0 0 10px; }
"""


# Mermaid blocks are drawn as GitHub draws them where a mermaid.min.js is given (``--mermaid``; npm's mermaid
# package ships one in dist/): each ```mermaid block becomes a diagram. The visible text (what a reader sees with
# every <details> closed) is written into #ds4ci-visible, for a test to read from the page's DOM.
SCRIPT = """
document.querySelectorAll('code.language-mermaid').forEach(function (code) {
  var pre = document.createElement('pre'); pre.className = 'mermaid'; pre.textContent = code.textContent;
  code.parentNode.replaceWith(pre);
});
function ds4ciVisible() {
  var out = document.createElement('pre'); out.id = 'ds4ci-visible'; out.style.display = 'none';
  out.textContent = document.querySelector('.box').innerText; document.body.appendChild(out);
}
if (window.mermaid) {
  mermaid.initialize({startOnLoad: false});
  mermaid.run({querySelector: 'pre.mermaid'}).then(ds4ciVisible, ds4ciVisible);
} else { ds4ciVisible(); }
"""


def to_html(markdown_text: str, title: str, mermaid_js: Path | None = None) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True, "breaks": True}).enable("table").enable("strikethrough")
    body = md.render(markdown_text)
    loader = f"<script src='{mermaid_js.resolve().as_uri()}'></script>" if mermaid_js is not None else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style>{loader}</head><body>"
            f"<div class='box'><div class='bar'>{html.escape(title)}</div>{body}</div>"
            f"<script>{SCRIPT}</script></body></html>")


def _browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium not found: apt-get install -y chromium")
    return browser


FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--allow-file-access-from-files", "--virtual-time-budget=10000"]


def visible_dom(page: Path) -> str:
    """The page's DOM once its scripts ran (the diagrams drawn, #ds4ci-visible written)."""
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([_browser(), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                              check=True, capture_output=True, text=True, timeout=120)
    return done.stdout


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [_browser(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             f"--screenshot={png}", page.as_uri()],
            check=True, capture_output=True, timeout=120,
        )


def check_run_markdown(results_file: Path, run_url: str) -> tuple[str, str]:
    """(page title, Markdown) of the check run publish makes for ``results_file``."""
    from ds4ci.evidence.results import load
    from ds4ci.github import checkruns, publish
    from ds4ci.report import render
    from ds4ci.report.docview import view_of

    doc = view_of(load(results_file))
    head = doc.head or "0" * 40
    [decision] = publish.plan_statuses([doc], head, run_url)
    run = checkruns.plan(doc, decision.state, decision.description, decision.sha, env=render.environment(),
                         run_url=run_url, predecessor=None, signature="not checked: no runner key configured")
    page = f"**{run.name}** · conclusion **{run.conclusion}**\n\n## {run.title}\n\n{run.summary}\n\n---\n\n{run.text}"
    return f"Checks › {run.name}", page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-run", action="store_true", help="the input is a results.json: render its check run")
    parser.add_argument("markdown", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=960)
    parser.add_argument("--height", type=int, default=1400)
    parser.add_argument("--title", default="github-actions commented")
    parser.add_argument("--mermaid", type=Path, help="a mermaid.min.js: draw the ```mermaid blocks as GitHub does")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        page = Path(work) / "page.html"
        title, text = args.title, ""
        if args.check_run:
            title, text = check_run_markdown(args.markdown, "https://github.com/acme/engine/actions/runs/7")
        else:
            text = args.markdown.read_text(encoding="utf-8")
        page.write_text(to_html(text, title, args.mermaid), encoding="utf-8")
        screenshot(page, args.png.resolve(), args.width, args.height)
    print(args.png)


if __name__ == "__main__":
    main()
