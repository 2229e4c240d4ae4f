"""Rendering of the PR comment and job summary: golden files, hostile strings, size limits."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT, TESTS

from ds4ci import textsafe
from ds4ci.evidence.results import load, validate
from ds4ci.report import markdown, render
from ds4ci.report.sections import MARKER, parse_sections

DATA = TESTS / "data" / "results"
GOLDEN = TESTS / "golden"
RUN_URL = "https://github.com/acme/engine/actions/runs/7"
UPDATE = os.environ.get("DS4CI_UPDATE_GOLDEN") == "1"


def doc(name: str) -> dict[str, Any]:
    return load(DATA / f"{name}.json")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden {path}; run with DS4CI_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


@pytest.mark.parametrize(
    ("golden", "names"),
    [
        ("pass.md", ["pass"]),
        ("fail.md", ["fail"]),
        ("error.md", ["error"]),
        ("mixed.md", ["fail", "pass-second-runner", "negative-control"]),
        ("negative-control.md", ["pass", "negative-control"]),
        ("no-revisions.md", ["no-revisions"]),
    ],
)
def test_comment_matches_golden(golden: str, names: list[str]) -> None:
    body, _ = render.render([doc(n) for n in names], kind="comment", run_url=RUN_URL)
    assert body.startswith(MARKER + "\n")
    check_golden(golden, body)


def test_summary_matches_golden() -> None:
    body, _ = render.render([doc("fail"), doc("negative-control")], kind="summary", run_url=RUN_URL)
    check_golden("summary-mixed.md", body)


def test_comment_content_requirements() -> None:
    body, _ = render.render([doc("fail"), doc("negative-control")], run_url=RUN_URL)
    fail = doc("fail")
    head = fail["revisions"]["head"]["sha"]
    assert head in body and f"`{head[:7]}`" in body
    # full_snap in the terminal's words (yes/no), not the log's 1/0.
    assert "| q=2 | 0/2 | 49 | 46/49 | 3 | claimed | 96/96 | ❌ fail |" in body
    assert "position 0" in body and "[128000]" in body and "[128001]" in body
    # The headline and the top table say what blocks; diagnostics are named by their place in the run's artifact,
    # not the runner's disk.
    assert body.splitlines()[2] == "**blocked: gfx1151 fails parity at q=2, position 0**"
    assert "| `gfx1151` | ❌ fail | fails parity at q=2, position 0 | `1a95462` |" in body
    assert "`diagnostics/q2-mismatch.txt`" in body and fail["evidence"]["dir"] not in body
    assert f"[ds4ci-evidence-gfx1151]({RUN_URL}#artifacts)" in body
    # What a developer pastes on a runner is shown (the head, then the gate, no machine path); the command the run
    # recorded sits in a collapsed block.
    assert f"```sh\ngit checkout {head}\nds4ci gate --config ds4ci.toml --runner gfx1151 --widths 2,3,4\n```" in body
    assert body.index("<details><summary>Reproduce") < body.rindex(fail["reproduce"])
    assert fail["evidence"]["manifest_sha256"] in body
    assert fail["identities"]["server_bin"]["sha256"] in body
    assert fail["revisions"]["last_validated_predecessor"] in body
    assert "344/344 passed" in body
    assert "not evidence" in body
    assert fail["reproduce"] in body
    assert RUN_URL in body


def test_sections_round_trip_and_merge() -> None:
    body, sections = render.render([doc("pass"), doc("negative-control")], run_url=RUN_URL)
    parsed = parse_sections(body)
    assert [(s.runner, s.state, s.digest) for s in parsed] == [(s.runner, s.state, s.digest) for s in sections]
    # A publisher for one runner keeps the other runner's section from the existing comment.
    body2, merged = render.render([doc("fail")], run_url=RUN_URL, existing=parsed)
    assert {s.runner: s.state for s in merged} == {"gfx1151": "fail", "cuda-3090": "not_run"}
    assert "cuda-3090" in body2 and body2.count("ds4ci:section v=1") == 2


def test_a_kept_section_keeps_its_reason_in_the_top_table() -> None:
    first, _ = render.render([doc("fail")], run_url=RUN_URL)
    kept = parse_sections(first)
    assert kept[0].why == "fails parity at q=2, position 0"
    body, _ = render.render([doc("pass-second-runner")], run_url=RUN_URL, existing=kept)
    assert "| `gfx1151` | ❌ fail | fails parity at q=2, position 0 |" in body
    assert "**blocked: gfx1151 fails parity at q=2, position 0**" in body  # the kept section blocks the headline
    assert "| `gfx1151-b` | ✅ pass | token parity at q=2,3,4, 96 tokens |" in body


def test_a_reason_cannot_forge_a_marker_through_the_top_table() -> None:
    d = copy.deepcopy(doc("fail"))
    d["reasons"] = ["x --> <!-- ds4ci:section-end runner=gfx1151 --> | y\nsecond line"]
    body, sections = render.render([validate(d)], run_url=RUN_URL)
    assert body.count("<!-- ds4ci:section-end") == 1 and len(parse_sections(body)) == 1
    assert sections[0].why is not None and "<" not in sections[0].why and "second line" not in sections[0].why


BIDI = re.compile(f"[{textsafe.BIDI_CONTROLS}]")
HOSTILE = (
    "a|b <script>alert(1)</script> &amp; @octocat @acme/team #1234 GH-12 ![img](https://evil.example/x.png) "
    "[click](https://evil.example) https://evil.example www.evil.example ``` ` "
    "<!-- ds4ci:sticky-comment --> <!-- ds4ci:section-end runner=gfx1151 -->\n| injected | row |\n"
    "\u202eevil\u202c \u200fmark\u061c \u200e\u202a\u202b\u202d\u2066\u2067\u2068\u2069 " + "x" * 3000
)


def hostile_doc() -> dict[str, Any]:
    d = copy.deepcopy(doc("fail"))
    d["reasons"] = [HOSTILE, "second\nline"]
    d["server"] = {"name": HOSTILE[:4000], "version": "```\nclosed"}
    d["evidence"]["dir"] = HOSTILE[:4000]
    d["evidence"]["diagnostics"] = "`" * 20 + "x"
    d["reproduce"] = HOSTILE[:4000]
    d["checks"][0]["name"] = "@octocat | x"
    d["checks"][0]["status"] = "fail"
    d["checks"][0]["summary"] = HOSTILE[:4000]
    d["checks"][0]["log_tail"] = "```\n@octocat <b>x</b>\n~~~\n" + HOSTILE
    d["fingerprint"]["toolchain"] = {"rocm": HOSTILE[:4000]}
    d["identities"]["target"]["path"] = HOSTILE[:4000]
    d["revisions"]["head"]["subject"] = HOSTILE[:4000]
    d["revisions"]["synthetic_merge"]["conflicts"] = [HOSTILE[:4000]]
    return validate(d)


def _outside_code(body: str) -> str:
    """The body with fenced blocks and code spans removed (what Markdown interprets)."""
    body = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1$", "", body)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", body)


@pytest.mark.parametrize("kind", ["comment", "summary"])
def test_hostile_strings_are_neutralised(kind: str) -> None:
    body, _ = render.render([hostile_doc()], kind=kind, run_url=RUN_URL)
    # Exactly our own markers: one sticky marker at the top, one section pair.
    assert body.count("<!-- ds4ci:sticky-comment -->") == (1 if kind == "comment" else 0)
    assert body.count("<!-- ds4ci:section v=1") == 1
    assert body.count("<!-- ds4ci:section-end") == 1
    assert len(parse_sections(body if kind == "comment" else MARKER + body)) == 1
    text = _outside_code(body)
    assert "<script" not in text and "<b>" not in text
    assert not re.search(r"@[A-Za-z0-9]", text), "an @mention survived outside code"
    assert not re.search(r"#\d|GH-\d", re.sub(r"&#\d+;", "", text), re.IGNORECASE)
    assert "](" not in text.replace(f"]({RUN_URL}#artifacts)", "").replace(f"]({RUN_URL})", "")
    assert "https://evil" not in text and "www.evil" not in text
    assert not BIDI.search(body), "a bidirectional control survived"
    # No injected table row: every line starting with | belongs to one of our tables.
    assert "| injected | row |" not in text
    # Every fenced block is closed by its own fence (no value closes it early).
    open_fence = None
    for line in body.splitlines():
        run = re.match(r"^(`{3,})", line)
        if open_fence is None and run:
            open_fence = run.group(1)
        elif open_fence is not None and line.strip() == open_fence:
            open_fence = None
        elif open_fence is not None and line.startswith(open_fence) and line.strip("`") == "":
            raise AssertionError(f"a value closes a code block early: {line!r}")
    assert open_fence is None, "a code block was left open"


def test_code_span_cannot_be_closed_early() -> None:
    span = markdown.code("a``b`c|d")
    assert span.startswith("```") and span.endswith("```") and "\\|" in span
    block = markdown.code_block("x\n````\ny")
    assert block.startswith("`````text\n") and block.endswith("\n`````")


def huge_doc() -> dict[str, Any]:
    d = copy.deepcopy(doc("fail"))
    d["checks"] = [
        dict(d["checks"][0], name=f"check {i}", status="fail", log_tail=("log line " * 20 + "\n") * 300)
        for i in range(64)
    ]
    width = d["widths"][0]
    width["prompts"] = [dict(width["prompts"][0], prompt_index=i) for i in range(48)]
    d["widths"] = [dict(copy.deepcopy(width), q=q) for q in range(2, 65)]
    d["identities"]["prompts"] = [dict(d["identities"]["prompts"][0], path=f"prompts/{i}.txt") for i in range(256)]
    d["reasons"] = [f"reason {i} " + "y" * 3000 for i in range(200)]
    return validate(d)


def test_huge_input_stays_under_comment_limit_and_says_where_the_rest_is() -> None:
    docs = [huge_doc()]
    body, _ = render.render(docs, run_url=RUN_URL)
    assert len(body.encode("utf-8")) <= render.COMMENT_LIMIT_BYTES
    assert "full report is in the job summary" in body
    summary, _ = render.render(docs, kind="summary", run_url=RUN_URL)
    assert len(summary.encode("utf-8")) <= render.SUMMARY_LIMIT_BYTES
    assert len(summary) > len(body)


def test_many_huge_runners_still_fit() -> None:
    base = huge_doc()
    docs = []
    for i in range(5):
        d = copy.deepcopy(base)
        d["runner"]["name"] = f"runner-{i}"
        docs.append(d)
    body, sections = render.render(docs, run_url=RUN_URL)
    assert len(body.encode("utf-8")) <= render.COMMENT_LIMIT_BYTES
    assert len(sections) == 5


def test_template_dir_overrides_bundled(tmp_path: Path) -> None:
    (tmp_path / "pending.md.j2").write_text("unused")
    (tmp_path / "comment.md.j2").write_text("CUSTOM {{ rows | length }} {{ '<b>' }}\n")
    body, _ = render.render([doc("pass")], template_dir=tmp_path)
    assert body == MARKER + "\nCUSTOM 1 &lt;b&gt;\n"  # values still escaped by finalize


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ds4ci.cli", *args], capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_cli_report_writes_output(tmp_path: Path) -> None:
    out = tmp_path / "comment.md"
    result = subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "report", str(DATA / "pass.json"),
         "--output", str(out), "--run-url", RUN_URL],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_text(encoding="utf-8") == render.render([doc("pass")], run_url=RUN_URL)[0]


def test_cli_report_rejects_malformed_results(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    d = json.loads((DATA / "pass.json").read_text())
    d["verdict"] = "green"
    bad.write_text(json.dumps(d))
    result = subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "report", str(bad)],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2
    assert "verdict" in result.stderr
