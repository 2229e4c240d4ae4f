"""`ds4ci demo` (the README's quick start) and the reporting commands on its real results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ds4ci ARGS`` as a user runs it: without the suite's own sandbox view (DS4CI_SANDBOX_*)."""
    given = os.environ if env is None else env
    env = {k: v for k, v in given.items() if not k.startswith("DS4CI_SANDBOX_")}
    return subprocess.run([str(BIN / "ds4ci"), *args], capture_output=True, text=True, timeout=300, check=False, env=env)


def test_demo_passes_catches_the_leak_and_its_results_report_and_dry_run_publish(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    demo = run("demo", "--keep", str(keep))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "clean run passed; leaked approximate verifier was caught" in demo.stdout
    # the simulator needs no GPU, and the demo says none (issue 41): no hip:0, nothing to free
    assert "hip:0" not in demo.stdout + demo.stderr and "free the GPU" not in demo.stderr, demo.stderr
    assert "target-only: on cpu:0" in demo.stderr
    good = json.loads((keep / "demo-sim.results.json").read_text())
    leak = json.loads((keep / "demo-sim-leak.results.json").read_text())
    assert (good["verdict"], leak["verdict"]) == ("pass", "fail")
    assert [w["q"] for w in good["widths"]] == [2, 3, 4]
    head = good["revisions"]["head"]["sha"]
    assert good["revisions"]["synthetic_merge"]["status"] == "clean"

    files = [str(keep / "demo-sim.results.json"), str(keep / "demo-sim-leak.results.json")]
    report = run("report", *files)
    assert report.returncode == 0, report.stderr
    assert "<!-- ds4ci:sticky-comment -->" in report.stdout and "demo-sim-leak" in report.stdout

    out = tmp_path / "dry"
    dry = run("publish", *files, "--repo", "owner/name", "--sha", head, "--pr", "7", "--dry-run", "--dry-run-dir", str(out))
    assert dry.returncode == 0, dry.stderr
    assert f"ds4ci/demo-sim=success on {head}" in dry.stdout
    assert f"ds4ci/demo-sim-leak=failure on {head}" in dry.stdout
    # The comment, the job summary and each check run as GitHub would get them, as Markdown files; the plan as JSON.
    assert sorted(p.name for p in out.iterdir()) == [
        "check-run-demo-sim-leak.md", "check-run-demo-sim.md", "comment.md", "plan.json", "summary.md"]
    comment, summary = (out / "comment.md").read_text(), (out / "summary.md").read_text()
    assert comment.startswith("<!-- ds4ci:sticky-comment -->") and comment.index("demo-sim-leak") < comment.index(
        "`demo-sim`")  # the failure first
    assert "<details><summary>✅ pass: demo-sim:" in comment and len(summary) > len(comment)
    check = (out / "check-run-demo-sim-leak.md").read_text()
    assert f"**Title**: fail on {head[:12]}: 1 cause, each in the summary" in check
    assert f"### ❌ fail: `demo-sim-leak` on `{head}`" in check
    assert "q=2,3,4 prompt 0 requests 1, 2: token IDs differ" in check  # the cause said once for the three widths

    stale = run("publish", *files, "--repo", "owner/name", "--sha", "0" * 40, "--dry-run")
    assert stale.returncode != 0 and "success" not in stale.stdout


def test_demo_refuses_an_existing_keep_directory(tmp_path: Path) -> None:
    result = run("demo", "--keep", str(tmp_path))
    assert result.returncode == 2 and "expected a new directory" in result.stderr


def test_demo_without_keep_prints_no_path_it_removes(tmp_path: Path) -> None:
    """The temporary workspace is gone when the demo ends, so no line may name a path inside it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "DS4CI_LOG")}
    demo = run("demo", env={**env, "TMPDIR": str(tmpdir)})
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert list(tmpdir.iterdir()) == []  # the workspace really was temporary
    out = demo.stdout + demo.stderr
    assert str(tmpdir) not in out
    assert "evidence: <demo workspace>/evidence/runs/" in demo.stdout
    assert "attempt " in demo.stderr and " in <demo workspace>/evidence/attempts/" in demo.stderr
    last = demo.stdout.rstrip().splitlines()[-1]
    assert last == "demo workspace: <demo workspace> was temporary and is removed now; keep one with --keep DIR"
