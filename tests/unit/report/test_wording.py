"""Words a maintainer reads: an arm that never ran, the whole Reproduce command, long reasons in the table."""

from __future__ import annotations

import copy
import json
from typing import Any

from paths import TESTS

from ds4ci.evidence import results
from ds4ci.report import render, table


def doc(name: str) -> Any:
    return json.loads((TESTS / "data" / "results" / name).read_text())


def test_an_arm_that_never_ran_reads_not_run() -> None:
    d = doc("error.json")
    d["target_only"] = {**d["target_only"], "verdict": "not_run", "deterministic": False}
    text = table.render(d)
    assert "target-only: not run;" in text and "deterministic" not in text
    body, _ = render.render([d], kind="summary")
    assert "**Target-only**: not run" in body and "deterministic" not in body


def test_an_arm_that_never_answered_is_not_called_nondeterministic() -> None:
    d = doc("error.json")  # target-only never became ready: no prompt has an answer
    assert all(p["n"] is None for p in d["target_only"]["prompts"]) and d["target_only"]["deterministic"] is False
    text = table.render(d)
    assert "target-only: error (no answer);" in text and "deterministic" not in text
    body, _ = render.render([d], kind="comment")
    assert "**Target-only**: error (no answer)" in body and "deterministic" not in body


def test_full_snap_is_reported_as_the_servers_claim_in_the_terminal_and_the_comment() -> None:
    d = doc("pass.json")
    assert table.HEADERS[4:6] == ("rejected drafts", "full_snap claimed") and table.rows(d)[0][4:6] == ("3", "yes")
    body, _ = render.render([d], kind="summary")  # the comment collapses a pass to one line; the summary has the table
    assert "| q=2 | 2/2 | 49 | 46/49 | 3 | claimed | 96/96 | ✅ pass |" in body
    rollback = next(line for line in body.splitlines() if line.startswith("**Rollback**"))
    assert "claimed by the server" in rollback
    assert "What the gate tested: q=2: identical answers after 3 rejected drafts" in rollback


def test_rolled_back_never_stands_alone_as_a_fact_the_gate_saw() -> None:
    """The server's claim of rollback is said to be its claim; what the gate saw is parity after rejected drafts."""
    for name in ("pass.json", "fail.json", "pass-second-runner.json", "no-revisions.json"):
        comment, _ = render.render([doc(name)], kind="comment")
        summary, _ = render.render([doc(name)], kind="summary")
        for out in (comment, summary, table.render(doc(name))):
            assert "rolled back" not in out.lower() and "rollback observed" not in out.lower(), name


def test_a_summary_without_full_snap_1_reads_not_claimed() -> None:
    d = copy.deepcopy(doc("pass.json"))
    for p in d["widths"][0]["prompts"]:
        p["full_snap_claimed"] = False
    body, _ = render.render([d], kind="summary")
    assert "| q=2 | 2/2 | 49 | 46/49 | 3 | not claimed | 96/96 |" in body
    rollback = next(line for line in body.splitlines() if line.startswith("**Rollback**"))
    assert "claimed by the server" in rollback and "at q=3" in rollback and "q=2," not in rollback.split(".")[0]


def test_the_reproduce_command_is_never_shortened() -> None:
    for kind, name in (("comment", "fail.json"), ("summary", "pass.json")):  # a passing runner's is in the summary
        d = copy.deepcopy(doc(name))
        d["reproduce"] = "ds4ci gate " + " ".join(f"--prompt-file /very/long/path/number/{i}/prompt.txt" for i in range(60))
        results.validate(d)
        body, _ = render.render([d], kind=kind)
        assert d["reproduce"] in body, kind


def test_the_table_shows_a_log_reason_whole() -> None:
    d = doc("error.json")
    reason = "q=2: request failed;\nabort lines:\n[stderr] GGML_ASSERT(x) failed\nlast 8 line(s) of stderr:\n" + "\n".join(
        f"[stderr] frame {i}" for i in range(8)
    )
    d["reasons"] = [reason]
    text = table.render(d)
    assert "GGML_ASSERT(x) failed" in text and "[stderr] frame 7" in text and "more lines" not in text
