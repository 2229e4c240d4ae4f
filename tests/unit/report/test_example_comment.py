"""docs/example-comment.md: the comment adopters see for a realistic two-runner case, kept true.

The sm90 section is the real H200 self-test result (tests/data/selftest/); the build record, the
gfx1151 runner's history and the review state are illustrative inputs. The page is rendered by the
same code as every comment and compared byte for byte: refresh it with DS4CI_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
from typing import Any, cast

from paths import ROOT, TESTS

from ds4ci.evidence import results
from ds4ci.github import merge
from ds4ci.report import markdown, render

EXAMPLE = ROOT / "docs" / "example-comment.md"
H200 = TESTS / "data" / "selftest" / "h200-bf16-exact.results.json"
PREDECESSOR = "6420571" + "0" * 33
RUN_URL = "https://github.com/acme/engine/actions/runs/4242"
HEAD_NOTE = (
    "# Example: the ds4ci comment for a two-runner pull request\n\n"
    "Rendered by `tests/unit/report/test_example_comment.py` with the same code as every comment. The `h200` section is a real\n"
    "NVIDIA H200 self-test result (docs/selftest.md); its build record, the `gfx1151` runner's history and the\n"
    "review state are illustrative. Everything below the line is the comment as GitHub shows it.\n\n---\n\n"
)


def example() -> str:
    doc = cast(dict[str, Any], results.load(H200))  # through the one converter: the capture is of schema 2
    doc["build"] = {
        "command": "cmake --build build -j", "cwd": "/runner/_work/engine/engine", "server_bin": "build/bin/dflash_server",
        "status": "pass", "exit_code": 0, "duration_s": 412.8, "targets_built": 465, "targets_total": 465,
        "summary": "built: [465/465] build steps", "log_tail": "[465/465] Linking CXX executable bin/dflash_server\n",
    }
    head = doc["revisions"]["head"]["sha"]
    env = render.environment()
    missing = render.needs_hardware_section(
        env, "gfx1151", head, [2, 3, 4], PREDECESSOR, [head], ["server/src/deepseek4/deepseek4_dspark_spec.cpp"],
    )
    checklist = merge.checklist_markdown(merge.MergeReport(pr=42, head=head, conditions=(
        merge.Condition("pull request", True, "open, not a draft, mergeable"),
        merge.Condition("gate ds4ci/h200", True, f"success on {head[:12]}"),
        merge.Condition("gate ds4ci/gfx1151", False, f"no status on {head[:12]}; it was success only on {PREDECESSOR[:12]}"),
        merge.Condition("check repository CI", True, f"check run concluded success on {head[:12]}"),
        merge.Condition("check ai-review", True, f"status success on {head[:12]}"),
        merge.Condition("approvals", False, f"0 of 1 required approval(s) on {head[:12]}"),
        merge.Condition("review threads", True, "all 7 review threads are resolved"),
    )))
    body, _ = render.render([doc], kind="comment", extra=[missing], merge_status=checklist, run_url=RUN_URL)
    return HEAD_NOTE + body


def test_the_example_comment_in_the_docs_is_what_ds4ci_renders() -> None:
    text = example()
    if os.environ.get("DS4CI_UPDATE_GOLDEN"):
        EXAMPLE.write_text(text, encoding="utf-8")
    assert EXAMPLE.read_text(encoding="utf-8") == text, "docs/example-comment.md is stale; DS4CI_UPDATE_GOLDEN=1"
    for section in ("**Revisions**", "build ✅ pass (465/465 targets built, 412.8 s)", "rejected drafts", "still needs hardware",
                    "a q=2,3,4 run on `gfx1151`", "Review and merge status", "<details><summary>✅ pass: h200",
                    "| `gfx1151` | ⏳ pending | still needs a q=2,3,4 run on this head |"):
        assert section in text, section
    assert markdown.code("h200") in text
