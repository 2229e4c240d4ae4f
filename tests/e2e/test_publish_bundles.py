"""`ds4ci publish` rests every status on verified evidence bundles from real gate runs.

The attack this closes: a process left behind by the server under test rewrites results.json
(verdicts flipped, a failing width dropped) before publishing. Publish re-derives the verdict from
the bundle, so the forged file never turns a status green.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import BOT_LOGIN, WRITE_TOKEN, FakeGitHub
from gatekit import Workspace, git_repo

RUNNER = "test-runner"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A passing and a failing gate run on one recorded head, with their bundles (directory and archive)."""
    root = tmp_path_factory.mktemp("bundles")
    repo = root / "source"
    head = git_repo(repo, {"server.c": "int main(void) { return 0; }\n"})
    ws = Workspace.create(root)
    config = root / "ds4ci.toml"
    config.write_text("[gate]\nwidths = [2, 3]\n")  # every configured width runs: full scope
    good = ws.gate(widths="2,3", source_dir=repo, bundle_out=root / "pass.tar.gz", config=config)
    bad = ws.gate(faults="leak-fused-verify@q3", widths="2,3", source_dir=repo, config=config)
    focused = ws.gate(widths="2", source_dir=repo, config=config)
    assert focused.code == 0 and focused.results is not None
    assert good.code == 0 and bad.code == 1, good.stderr + bad.stderr
    assert good.results is not None and bad.results is not None
    return {
        "head": head, "pass": Path(good.results["evidence"]["dir"]), "fail": Path(bad.results["evidence"]["dir"]),
        "pass.tar.gz": root / "pass.tar.gz", "focused": Path(focused.results["evidence"]["dir"]),
    }


@pytest.fixture
def fake(runs: dict[str, Any]) -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, runs["head"], [runs["head"]])
    yield server
    server.stop()


def publish(fake: FakeGitHub, *paths: Path | str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "publish", *map(str, paths),
         "--repo", "acme/engine", "--pr", "42", "--api-url", fake.url],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )


def states(fake: FakeGitHub) -> dict[str, str]:
    return {s["context"]: s["state"] for s in fake.statuses()}


def forged(runs: dict[str, Any], tmp_path: Path, change: Any) -> Path:
    bundle = tmp_path / "forged"
    shutil.copytree(runs["fail"], bundle)
    doc = json.loads((bundle / "results.json").read_text())
    change(doc)
    (bundle / "results.json").write_text(json.dumps(doc))
    return bundle


@pytest.mark.parametrize("which", ["pass", "pass.tar.gz"])
def test_a_verified_passing_bundle_sets_success(runs: dict[str, Any], fake: FakeGitHub, which: str) -> None:
    proc = publish(fake, runs[which])
    assert proc.returncode == 0, proc.stderr
    assert states(fake) == {f"ds4ci/{RUNNER}": "success"}


def test_a_verified_failing_bundle_sets_failure(runs: dict[str, Any], fake: FakeGitHub) -> None:
    assert publish(fake, runs["fail"]).returncode == 0
    assert states(fake) == {f"ds4ci/{RUNNER}": "failure"}


FORGERIES = {
    "verdicts flipped to pass": lambda d: (
        d.update(verdict="pass", exit_code=0, reasons=[]),
        [w.update(verdict="pass", reasons=[]) for w in d["widths"]],
        [c.update(verdict="pass", reasons=[], mismatch=None) for w in d["widths"] for c in w["prompts"]],
    ),
    "failing width dropped": lambda d: d.update(verdict="pass", exit_code=0, reasons=[], widths=d["widths"][:1]),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forged_results_file_is_published_as_error_with_no_pass(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path, name: str
) -> None:
    proc = publish(fake, forged(runs, tmp_path, FORGERIES[name]))
    assert proc.returncode == 0, proc.stderr
    assert states(fake) == {f"ds4ci/{RUNNER}": "error"}
    (status,) = fake.statuses()
    assert "evidence does not verify" in status["description"]
    (comment,) = fake.comments(42)
    assert "evidence does not verify" in comment["body"] and "✅" not in comment["body"]


def test_a_results_file_is_published_through_its_bundle(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    copy = tmp_path / "results.json"  # what --results-out leaves: the same bytes as the bundle's own
    copy.write_bytes((runs["pass"] / "results.json").read_bytes())
    proc = publish(fake, copy)
    assert proc.returncode == 0, proc.stderr
    assert states(fake) == {f"ds4ci/{RUNNER}": "success"}


def test_a_results_file_that_differs_from_its_bundle_is_refused(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    copy = tmp_path / "results.json"
    doc = json.loads((runs["fail"] / "results.json").read_text())
    doc.update(verdict="pass", exit_code=0, reasons=[])
    copy.write_text(json.dumps(doc))
    proc = publish(fake, copy)
    assert proc.returncode == 2 and "differs from its evidence bundle" in proc.stderr
    assert fake.statuses() == [] and fake.comments(42) == []


def test_an_unverified_section_never_replaces_a_verified_one(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    """A fork's artifact (no bundle here) claiming fail for a runner cannot overwrite its verified pass."""
    assert publish(fake, runs["pass"]).returncode == 0
    claim = json.loads((runs["fail"] / "results.json").read_text())
    claim["evidence"]["dir"] = str(tmp_path / "gone")
    path = tmp_path / "claim.json"
    path.write_text(json.dumps(claim))
    proc = publish(fake, path, "--unverified", "--no-status")
    assert proc.returncode == 0, proc.stderr
    (comment,) = fake.comments(42)
    assert "✅ pass" in comment["body"] and "unverified" not in comment["body"]
    assert states(fake) == {f"ds4ci/{RUNNER}": "success"}


def _add_full_pass_on_an_ancestor(fake: FakeGitHub, runs: dict[str, Any]) -> str:
    ancestor = "a" * 40
    fake.add_pull(42, runs["head"], [ancestor, runs["head"]])
    fake.add_status(ancestor, f"ds4ci/{RUNNER}", "success", "pass: token parity at q=2,3, 64 tokens", creator=BOT_LOGIN)
    return ancestor


def test_a_focused_rerun_stays_pending_unless_policy_allows_it(runs: dict[str, Any], fake: FakeGitHub) -> None:
    _add_full_pass_on_an_ancestor(fake, runs)
    proc = publish(fake, runs["focused"])
    assert proc.returncode == 0, proc.stderr
    (status,) = [s for s in fake.statuses() if s["sha"] == runs["head"]]
    assert status["state"] == "pending" and "full run required" in status["description"]
    (comment,) = fake.comments(42)
    assert "focused rerun: status pending" in comment["body"]


def test_a_focused_rerun_on_top_of_a_full_pass_is_green_where_allowed(runs: dict[str, Any], fake: FakeGitHub) -> None:
    ancestor = _add_full_pass_on_an_ancestor(fake, runs)
    proc = publish(fake, runs["focused"], "--allow-focused-reruns")
    assert proc.returncode == 0, proc.stderr
    (status,) = [s for s in fake.statuses() if s["sha"] == runs["head"]]
    assert status["state"] == "success" and f"on top of the full pass at {ancestor[:12]}" in status["description"]


def test_a_focused_rerun_without_a_full_pass_is_not_green_even_where_allowed(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["focused"], "--allow-focused-reruns")
    assert proc.returncode == 0, proc.stderr
    assert states(fake) == {f"ds4ci/{RUNNER}": "pending"}
    assert "no full pass on an ancestor" in fake.statuses()[0]["description"]


def test_the_comment_carries_the_review_and_merge_status_after_this_runs_statuses(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path
) -> None:
    config = tmp_path / "ds4ci.toml"
    config.write_text(f'[merge]\nrunners = ["{RUNNER}"]\nchecks = ["build"]\napprovals = 1\npublisher = "{BOT_LOGIN}"\n')
    fake.add_check_run(runs["head"], "build")
    fake.add_review(42, "alice", "APPROVED", runs["head"])
    fake.add_thread(42, "server/src/spec.cpp", 311)
    # the statuses link this run of the trusted gate, as the publish job's do; merge-check counts no other, and
    # only once the run's own job `verdict <runner>` (it runs after publish) has succeeded
    run = fake.add_run(4243, title=f"ds4ci gate {runs['head']}", jobs={f"verdict {RUNNER}": "queued"})
    proc = publish(fake, runs["pass"], "--merge-config", str(config), "--target-url", run)
    assert proc.returncode == 0, proc.stderr
    (comment,) = fake.comments(42)
    body = comment["body"]
    assert "**Review and merge status**" in body and "not ready: 2 condition(s) unmet" in body
    assert f"- [ ] gate ds4ci/{RUNNER}: success on the current head" in body  # the status this very publish set
    assert f"run 4243's job 'verdict {RUNNER}' has not finished (queued)" in body.replace("&#95;", "_")
    assert "- [ ] review thread server/src/spec.cpp:311" in body


def test_a_runner_without_a_result_says_what_it_last_validated_and_what_is_still_required(
    runs: dict[str, Any], fake: FakeGitHub
) -> None:
    ancestor = "b" * 40
    fake.add_pull(42, runs["head"], [ancestor, runs["head"]])
    fake.add_status(ancestor, "ds4ci/gfx1151", "success", "pass: token parity at q=2,3, 64 tokens", creator=BOT_LOGIN)
    fake.add_commit_files(runs["head"], ["server/src/spec.cpp", "server/src/verify.cpp"])
    proc = publish(fake, runs["pass"], "--expect-runner", "gfx1151", "--expect-runner", RUNNER)
    assert proc.returncode == 0, proc.stderr
    (comment,) = fake.comments(42)
    body = comment["body"]
    assert "`gfx1151`: still needs hardware" in body
    assert "a q=2,3 run on `gfx1151`" in body
    assert f"Last hardware-validated predecessor on this runner: `{ancestor}`" in body
    assert "1 commit(s)" in body and "`server/src/spec.cpp`" in body and "`server/src/verify.cpp`" in body
    assert fake.latest_states(runs["head"]) == {f"ds4ci/{RUNNER}": "success"}  # none made up for the missing one


def as_schema_2(runs: dict[str, Any], which: str, tmp_path: Path, flip: str | None = None) -> Path:
    """A copy of a bundle as ds4ci wrote it before schema 3 (no schema_version, no matched range); ``flip``: every
    recorded verdict set to it, as an older ds4ci's rules might have judged."""
    bundle = Path(shutil.copytree(runs[which], tmp_path / which))
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["schema_version"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    doc = json.loads((bundle / "results.json").read_text())
    del doc["schema_version"]
    doc["evidence"]["manifest_sha256"] = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    for width in doc["widths"]:
        for cell in width["prompts"]:
            del cell["matched_min"], cell["matched_max"]
            cell.update(verdict=flip or cell["verdict"])
        width.update(verdict=flip or width["verdict"])
    doc.update(verdict=flip or doc["verdict"])
    (bundle / "results.json").write_text(json.dumps(doc))
    return bundle


def test_an_older_bundle_is_published_by_its_re_derived_verdict_with_the_note(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path
) -> None:
    # recorded pass by an older ds4ci, but today's rules derive the failure: the status is today's
    assert publish(fake, as_schema_2(runs, "fail", tmp_path, flip="pass")).returncode == 0
    assert states(fake) == {f"ds4ci/{RUNNER}": "failure"}
    (comment,) = fake.comments(42)
    assert "sealed by ds4ci 0.1.0 (schema 2); re-derived by ds4ci 0.1.0 (schema 3): the verdicts differ" in comment["body"]


def test_an_older_passing_bundle_still_sets_success(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    assert publish(fake, as_schema_2(runs, "pass", tmp_path)).returncode == 0
    assert states(fake) == {f"ds4ci/{RUNNER}": "success"}
