"""`publish --bisect` (issue 44, item 3): a runner's bisect result is a section of the sticky comment and the job
summary beside its gate section, never a status; one of another head or runner is refused before anything is
posted. A real failing gate's bundle and the fake GitHub API over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisectkit import search
from fakegithub import FakeGitHub
from fakegithub import publish_cli as publish
from gatekit import Workspace, git_repo

from ds4ci.bisect.outcome import document
from ds4ci.bisect.search import expected_steps

pytestmark = pytest.mark.e2e


def bisect_file(path: Path, runner: str, head: str) -> Path:
    doc = document(search("p" * 9 + "f" * 7)[0], runner, expected_steps(16))
    doc["bad"] = {"sha": head, "subject": "the pull request's head"}
    doc["first_failing"] = {"sha": "c" * 40, "subject": "ds4: fuse verify path"}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_the_bisect_is_a_section_of_the_comment_and_the_summary_and_never_a_status(tmp_path: Path) -> None:
    repo = tmp_path / "source"
    head = git_repo(repo, {"server.c": "int main(void) { return 0; }\n"})
    ws = Workspace.create(tmp_path)
    bad = ws.gate(widths=None, source_dir=repo, faults="leak-fused-verify")
    assert bad.code == 1 and bad.results, bad.stderr
    bundle = bad.results["evidence"]["dir"]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(42, head, [head])
        stale = publish(fake, bundle, "--bisect", str(bisect_file(tmp_path / "old.json", "test-runner", "e" * 40)))
        assert stale.returncode == 2 and f"searched up to {'e' * 40}; expected the head" in stale.stderr, stale.stderr
        other = publish(fake, bundle, "--bisect", str(bisect_file(tmp_path / "other.json", "gfx1151", head)))
        assert other.returncode == 2 and "runner gfx1151's bisect; expected one of the runners published here " \
            "(test-runner)" in other.stderr, other.stderr
        assert fake.comments(42) == [] and fake.latest_states(head) == {}  # refused before anything was posted
        found = bisect_file(tmp_path / "bisect.json", "test-runner", head)
        summary = tmp_path / "summary.md"
        posted = publish(fake, bundle, "--bisect", str(found), "--summary-file", str(summary))
        assert posted.returncode == 0, posted.stderr
        [comment] = fake.comments(42)
        assert "First failing commit: `ccccccc` ds4: fuse verify path; parity at q=3 breaks at position 42" \
            in comment["body"]
        assert "role=bisect" in comment["body"] and "role=gate" in comment["body"]
        assert fake.latest_states(head) == {"ds4ci/test-runner": "failure"}  # the bisect set no status of its own
        steps = json.loads(found.read_text(encoding="utf-8"))["steps"]
        text = summary.read_text(encoding="utf-8")
        assert "| # | commit | subject | outcome | why | seconds |" in text  # the summary lists every step
        assert all(f"| {s['sha'][:7]}" in text or f"`{s['sha'][:7]}`" in text for s in steps), text
        again = publish(fake, bundle)  # the gate republished without --bisect: the bisect section stays
        assert again.returncode == 0 and "First failing commit" in fake.comments(42)[0]["body"], again.stderr
        dry = publish(fake, bundle, "--bisect", str(found), "--dry-run", "--dry-run-dir", str(tmp_path / "dry"))
        assert dry.returncode == 0, dry.stderr
        assert "First failing commit: `ccccccc`" in (tmp_path / "dry" / "comment.md").read_text(encoding="utf-8")
    finally:
        fake.stop()
