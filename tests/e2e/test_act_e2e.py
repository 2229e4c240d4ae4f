"""End to end: the real .github/workflows/gate.yml, dispatched by a maintainer, run by ``act`` in host mode.

A maintainer dispatches the gate for PR #7 pinned to its head. The workflow validates the
inputs (and the pinned head, against a stateful fake GitHub API on loopback), runs the matrix
over both self-hosted label sets with the composite action (which installs ds4ci into a fresh
venv and runs the gate against the bundled simulator), uploads results, and the aggregating
job posts ONE comment for both runners and one ds4ci/<runner> status each. What act replaces, and
how: tests/actkit.py.
"""

from __future__ import annotations

from pathlib import Path

from actkit import MARKS, act_log, adopter, git, make_repo, run_act
from fakegithub import APP_TOKEN, BOT_LOGIN, FakeGitHub

pytestmark = MARKS


def test_dispatch_runs_gate_on_both_runners_and_publishes_one_comment(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    models = tmp_path / "models"
    repo, head = make_repo(tmp_path, models)
    fake.add_pull(7, head)

    # The Actions GITHUB_TOKEN: an app installation token (github-actions[bot]), the one that may make check runs.
    proc = run_act(tmp_path, repo, fake, wheelhouse, models,
                {"pr": "7", "head-sha": head, "widths": "", "runners": "all"}, token=APP_TOKEN)  # every width: full

    assert proc.returncode == 0, act_log(proc)
    assert fake.latest_states(head) == {"ds4ci/gfx1151": "success", "ds4ci/sm86": "success"}, act_log(proc)
    # Each runner's job `verdict <runner>` (GitHub's own record, what merge-check reads) succeeded on publish's word.
    for runner in ("gfx1151", "sm86"):
        assert f"runner {runner}: verdict success" in proc.stdout + proc.stderr, act_log(proc)
    # The report job made one check run per runner beside each status, from the same verified bundle.
    runs = {r["name"]: r for r in fake.check_runs(head)}
    assert sorted(runs) == ["ds4ci/gfx1151", "ds4ci/sm86"], runs
    for runner, run in runs.items():
        assert (run["app"], run["status"], run["conclusion"]) == ("github-actions", "completed", "success"), run
        assert run["output"]["summary"].startswith(f"### ✅ pass: `{runner.split('/')[1]}`"), run["output"]
        assert "/actions/runs/" in (run["details_url"] or ""), run
        assert "**Reproduce**" in run["output"]["text"] and run["annotations"] == []
    # The PR's edited ds4ci.toml was not used (it would have failed its pin); the run says so.
    assert "this pull request changes ds4ci.toml; this run uses the trusted settings" in proc.stdout + proc.stderr
    assert "this pull request changes ds4ci.toml" in fake.comments()[0]["body"]  # in the comment too
    assert "build ✅ pass (2/2 targets built" in fake.comments()[0]["body"]  # the [build] step ran before the gate
    comments = fake.comments(7)
    assert len(comments) == 1, comments
    body = comments[0]["body"]
    assert "gfx1151" in body and "sm86" in body
    assert head[:12] in body
    # The whole history was fetched and the base passed on: the merge analysis is in the evidence.
    main = git(repo, "rev-parse", "main")
    assert f"base `{main[:7]}` `origin/main`" in body, body
    assert "synthetic merge clean" in body and "not_computed" not in body
    # Only the pinned head got statuses; main's commit got none.
    assert fake.statuses(git(repo, "rev-parse", "main")) == []


def test_dispatch_focused_rerun_reaches_publish_through_the_allow_input(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """widths 2,3 of the configured 2,3,4, with allow-focused-reruns: green on top of an ancestor's full pass."""
    models = tmp_path / "models"
    repo, head = make_repo(tmp_path, models)
    ancestor = git(repo, "rev-parse", "main")
    fake.add_pull(7, head, [ancestor, head])
    for runner in ("gfx1151", "sm86"):  # full passes the publisher itself posted on the ancestor
        fake.add_status(ancestor, f"ds4ci/{runner}", "success", "pass: token parity at q=2,3,4", creator=BOT_LOGIN)

    proc = run_act(tmp_path, repo, fake, wheelhouse, models,
                {"pr": "7", "head-sha": head, "widths": "2,3", "runners": "all", "allow-focused-reruns": "true"})

    assert proc.returncode == 0, act_log(proc)
    assert fake.latest_states(head) == {"ds4ci/gfx1151": "success", "ds4ci/sm86": "success"}, act_log(proc)
    descriptions = {s["description"] for s in fake.statuses(head)}
    assert descriptions == {f"focused pass at q=2,3 on top of the full pass at {ancestor[:12]}"}


def test_dispatch_refused_when_the_pr_head_moved(tmp_path: Path, fake: FakeGitHub, wheelhouse: Path) -> None:
    models = tmp_path / "models"
    repo, head = make_repo(tmp_path, models)
    fake.add_pull(7, "f" * 40)  # someone pushed after the maintainer's review

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {"pr": "7", "head-sha": head})

    assert proc.returncode != 0
    assert "refusing to run" in proc.stdout + proc.stderr, act_log(proc)
    assert fake.statuses() == [] and fake.comments() == []


def test_init_s_placeholder_stops_the_workflow_before_anything_runs(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    # No --ds4ci-ref: the placeholder init named, in a copy of gate.yml. (The caller's placeholder names no
    # workflow GitHub can fetch: GitHub refuses the file itself, and `config check` warns, test_workflow_pin.py.)
    engine, head = adopter(tmp_path, "--copy-workflows")
    fake.add_pull(7, head)

    proc = run_act(tmp_path, engine, fake, wheelhouse, None, {"pr": "7", "head-sha": head})

    assert proc.returncode != 0
    assert "DS4CI_REF at the top of this workflow: expected OWNER/NAME@REF" in proc.stdout + proc.stderr, act_log(proc)
    assert fake.statuses() == [] and fake.comments() == []
