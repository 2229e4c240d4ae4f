"""What `ds4ci publish` lets a bundle decide, walked with real gate runs, real bundles and the fake GitHub API.

Each test is an attack (or a user's path) from issues 16 and 19: a fork's results.json pointing at
its own folder, an old pass replayed onto another commit, a bundle made with other settings than
the trusted config, a bundle that names no commit, statuses posted by someone else than the
publisher, and a negative control's passing run.
"""

from __future__ import annotations

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
from gatekit import DS4CI, Workspace, git_repo

RUNNER = "test-runner"
CONTROL = "cuda-control"
OTHER = "c" * 40
TRUSTED = "[gate]\nwidths = [2, 3]\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("trust")
    repo = root / "source"
    head = git_repo(repo, {"server.c": "int main(void) { return 0; }\n"})
    ws = Workspace.create(root)
    config = root / "ds4ci.toml"
    config.write_text(TRUSTED)
    good = ws.gate(widths="2,3", source_dir=repo, config=config)
    narrow = root / "narrow.toml"
    narrow.write_text("[gate]\nwidths = [2]\n")
    other = ws.gate(widths="2", source_dir=repo, config=narrow)
    control_cfg = root / "control.toml"
    control_cfg.write_text(TRUSTED + '[runner]\nrole = "negative-control"\nnegative_control_for = "gfx1151"\n'
                           '[[checks]]\nname = "unit"\ncommand = "echo 3 passed"\n')
    control = ws.gate(widths="2,3", source_dir=repo, config=control_cfg, runner=CONTROL)
    focused = ws.gate(widths="2", source_dir=repo, config=config)
    outside = root / "not-a-checkout"  # no git here: the gate records no revisions
    outside.mkdir()
    norev = subprocess.run([DS4CI, "gate", *ws.args(widths="2,3", config=config, results_out=outside / "r.json")],
                           cwd=outside, env=ws.env(), capture_output=True, text=True, timeout=180, check=False)
    for run in (good, other, control, focused):
        assert run.code == 0 and run.results is not None, run.stderr
    assert norev.returncode == 0, norev.stderr
    norev_doc = json.loads((outside / "r.json").read_text())
    assert norev_doc["revisions"] is None
    return {"head": head, "pass": Path(good.results["evidence"]["dir"]), "trusted": config,
            "narrow": Path(other.results["evidence"]["dir"]), "control": Path(control.results["evidence"]["dir"]),
            "control.toml": control_cfg, "norev": Path(norev_doc["evidence"]["dir"]),
            "focused": Path(focused.results["evidence"]["dir"]), "focused.out": focused.stdout + focused.stderr,
            "full.out": good.stdout + good.stderr}


@pytest.fixture
def fake(runs: dict[str, Any]) -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, runs["head"], [runs["head"]])
    yield server
    server.stop()


def publish(fake: FakeGitHub, *args: Path | str, pr: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("GITHUB_ACTIONS", None)
    where = ["--pr", "42"] if pr else []
    return subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "publish", *map(str, args),
         "--repo", "acme/engine", *where, "--api-url", fake.url],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )


def edited(bundle: Path, tmp_path: Path, change: Any) -> Path:
    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    doc = json.loads((copy / "results.json").read_text())
    change(doc)
    (copy / "results.json").write_text(json.dumps(doc))
    return copy


# ----- --unverified follows nothing ------------------------------------------------------------


def test_an_unverified_fork_result_pointing_at_its_own_folder_is_not_followed(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path
) -> None:
    """The fork's artifact folder holds a self-consistent passing bundle, and its results.json points at it."""
    artifact = tmp_path / "ds4ci-results-test-runner"
    shutil.copytree(runs["pass"], artifact)
    doc = json.loads((artifact / "results.json").read_text())
    doc["evidence"]["dir"] = str(artifact)
    (artifact / "results.json").write_text(json.dumps(doc))
    proc = publish(fake, artifact / "results.json", "--unverified")  # no --no-status: none is set anyway
    assert proc.returncode == 0, proc.stderr
    assert fake.statuses() == []
    (comment,) = fake.comments(42)
    assert "unverified" in comment["body"] and "✅" not in comment["body"]
    assert "state=unverified" in comment["body"]


def test_unverified_takes_no_bundle(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["pass"], "--unverified")
    assert proc.returncode == 2 and "--unverified takes results.json files only" in proc.stderr
    assert fake.statuses() == [] and fake.comments(42) == []


# ----- the sealed head is the commit being marked ----------------------------------------------


def test_a_pass_replayed_onto_another_commit_is_refused(runs: dict[str, Any], fake: FakeGitHub) -> None:
    fake.add_pull(42, OTHER, [runs["head"], OTHER])
    proc = publish(fake, runs["pass"], "--sha", OTHER)
    assert proc.returncode == 2 and "refusing to mark a commit the evidence is not for" in proc.stderr
    assert fake.statuses() == []


def test_a_replay_with_the_head_edited_in_results_json_is_an_error(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path
) -> None:
    """results.json names the new commit; the sealed revisions.json still names the one the gate ran on."""
    fake.add_pull(42, OTHER, [runs["head"], OTHER])
    forged = edited(runs["pass"], tmp_path, lambda d: d["revisions"]["head"].update(sha=OTHER))
    proc = publish(fake, forged, "--sha", OTHER)
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["sha"] == OTHER and status["state"] == "error"
    # results.json is derived from the sealed files, so the edit no longer verifies at all
    assert "does not verify" in status["description"] and "revisions.head.sha" in status["description"]
    assert fake.latest_states(OTHER) != {f"ds4ci/{RUNNER}": "success"}


def test_a_bundle_with_no_sealed_revisions_sets_no_status(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["norev"], "--sha", runs["head"])
    assert proc.returncode == 2 and "record no revisions/head: refusing to publish" in proc.stderr
    assert fake.statuses() == []


def test_the_trusted_config_lets_its_own_bundle_pass(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["pass"], "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    assert fake.latest_states(runs["head"]) == {f"ds4ci/{RUNNER}": "success"}


def test_a_bundle_made_with_other_widths_is_an_error(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["narrow"], "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["state"] == "error"
    assert "made with settings the trusted config does not allow: widths [2] != [2, 3]" in status["description"]
    (comment,) = fake.comments(42)
    assert "made with settings the trusted config does not allow" in comment["body"] and "✅" not in comment["body"]


def test_a_bundle_made_with_other_checks_or_repeats_is_an_error(
    runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path
) -> None:
    stricter = tmp_path / "trusted.toml"
    stricter.write_text(TRUSTED + 'repeats = 3\n[[checks]]\nname = "unit"\ncommand = "ctest"\n')
    proc = publish(fake, runs["pass"], "--expect-config", stricter)
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["state"] == "error" and "checks [] != [['unit', 'ctest']]" in status["description"]
    assert "repeats 2 != 3" in status["description"]


# ----- negative controls -----------------------------------------------------------------------


def test_a_passing_negative_control_is_success_labelled_negative_control(runs: dict[str, Any], fake: FakeGitHub) -> None:
    verify = subprocess.run([DS4CI, "verify", str(runs["control"])], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    proc = publish(fake, runs["control"], "--expect-config", runs["control.toml"])
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["context"] == f"ds4ci/{CONTROL}" and status["state"] == "success"
    assert status["description"].startswith("negative control: ") and "no parity claim" in status["description"]


def test_a_gate_runner_claiming_to_be_a_negative_control_is_an_error(runs: dict[str, Any], fake: FakeGitHub) -> None:
    """The trusted config says which runners are negative controls; a bundle cannot say so itself."""
    proc = publish(fake, runs["control"], "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["state"] == "error" and "role 'negative-control' != 'gate'" in status["description"]


# ----- only the publisher's statuses count in the history --------------------------------------


def test_a_predecessor_posted_by_someone_else_is_not_shown(runs: dict[str, Any], fake: FakeGitHub) -> None:
    ancestor, mine = "a" * 40, "b" * 40
    fake.add_pull(42, runs["head"], [mine, ancestor, runs["head"]])
    fake.add_status(mine, "ds4ci/gfx1151", "success", "pass", creator=BOT_LOGIN)
    fake.add_status(ancestor, "ds4ci/gfx1151", "success", "pass", creator="mallory")
    proc = publish(fake, runs["pass"], "--expect-runner", "gfx1151")
    assert proc.returncode == 0, proc.stderr
    body = fake.comments(42)[0]["body"]
    assert f"Last hardware-validated predecessor on this runner: `{mine}`" in body
    assert ancestor not in body


def test_a_focused_rerun_over_a_foreign_full_pass_stays_pending(runs: dict[str, Any], fake: FakeGitHub) -> None:
    ancestor = "a" * 40
    fake.add_pull(42, runs["head"], [ancestor, runs["head"]])
    fake.add_status(ancestor, f"ds4ci/{RUNNER}", "success", "pass: token parity at q=2,3", creator="mallory")
    proc = publish(fake, runs["focused"], "--allow-focused-reruns", "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    assert fake.latest_states(runs["head"]) == {f"ds4ci/{RUNNER}": "pending"}
    assert "no full pass on an ancestor" in fake.statuses(runs["head"])[0]["description"]
    fake.add_status(ancestor, f"ds4ci/{RUNNER}", "success", "pass: token parity at q=2,3", creator=BOT_LOGIN)
    assert publish(fake, runs["focused"], "--allow-focused-reruns", "--expect-config", runs["trusted"]).returncode == 0
    assert fake.latest_states(runs["head"]) == {f"ds4ci/{RUNNER}": "success"}


def test_a_focused_rerun_over_a_full_pass_no_gate_run_vouches_for_stays_pending(
        runs: dict[str, Any], fake: FakeGitHub) -> None:
    """The publisher's own account, but the link is copied from a gate run whose verdict job failed."""
    ancestor = "a" * 40
    fake.add_pull(42, runs["head"], [ancestor, runs["head"]])
    failed = fake.add_run(901, title=f"ds4ci gate {ancestor}", jobs={f"verdict {RUNNER}": "failure"})
    fake.add_status(ancestor, f"ds4ci/{RUNNER}", "success", "pass: token parity at q=2,3", creator=BOT_LOGIN,
                    target_url=failed)
    proc = publish(fake, runs["focused"], "--allow-focused-reruns", "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    assert fake.latest_states(runs["head"]) == {f"ds4ci/{RUNNER}": "pending"}
    assert "no full pass on an ancestor" in fake.statuses(runs["head"])[0]["description"]


def test_a_predecessor_no_gate_run_vouches_for_is_not_shown(runs: dict[str, Any], fake: FakeGitHub) -> None:
    ancestor, mine = "a" * 40, "b" * 40
    fake.add_pull(42, runs["head"], [mine, ancestor, runs["head"]])
    fake.add_status(mine, "ds4ci/gfx1151", "success", "pass", creator=BOT_LOGIN)  # its gate run vouches
    other = fake.add_run(902, title=f"ds4ci gate {ancestor}", path=".github/workflows/other.yml",
                         jobs={"verdict gfx1151": "success"})
    fake.add_status(ancestor, "ds4ci/gfx1151", "success", "pass", creator=BOT_LOGIN, target_url=other)
    proc = publish(fake, runs["pass"], "--expect-runner", "gfx1151")
    assert proc.returncode == 0, proc.stderr
    body = fake.comments(42)[0]["body"]
    assert f"Last hardware-validated predecessor on this runner: `{mine}`" in body
    assert ancestor not in body


def test_verdicts_out_names_each_runner_s_decided_state(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    out = tmp_path / "verdicts.json"
    proc = publish(fake, runs["pass"], "--verdicts-out", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {RUNNER: "success"}
    fake.inject(500, 10, methods={"POST"}, path_contains="/statuses/")
    out.unlink()
    # another run's link: the status differs from the one set (the same publish again writes nothing, issue 43)
    again = publish(fake, runs["pass"], "--verdicts-out", out, "--target-url", "https://github.com/acme/engine/actions/runs/8")
    assert again.returncode == 3, again.stderr
    assert not out.exists()  # a publish that failed leaves no verdict: the verdict job fails


def test_a_focused_rerun_says_focused_in_the_pass_line_and_the_table(runs: dict[str, Any]) -> None:
    out = runs["focused.out"]
    (verdict,) = [line for line in out.splitlines() if "verdict PASS" in line]
    assert "focused rerun: q=2 of the configured 2,3" in verdict
    (table_line,) = [line for line in out.splitlines() if f"runner {RUNNER}: PASS" in line]
    assert "focused rerun" in table_line
    assert "scope: focused rerun" in out
    assert "focused" not in runs["full.out"]


def test_a_focused_rerun_names_the_real_switch(runs: dict[str, Any], fake: FakeGitHub) -> None:
    proc = publish(fake, runs["focused"], "--expect-config", runs["trusted"])
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses()
    assert status["state"] == "pending" and "--allow-focused-reruns" in status["description"]
    assert "[merge]" not in status["description"]


def test_revisions_added_to_results_json_alone_do_not_verify(runs: dict[str, Any], fake: FakeGitHub, tmp_path: Path) -> None:
    """A forger copies a passing run's revisions into a bundle that sealed none: never success."""
    revisions = json.loads((runs["pass"] / "revisions.json").read_text())
    forged = edited(runs["norev"], tmp_path, lambda d: d.update(revisions=revisions))
    proc = publish(fake, forged, "--sha", runs["head"])
    assert proc.returncode == 0, proc.stderr
    assert [s["state"] for s in fake.statuses()] == ["error"]
    assert "does not verify" in fake.statuses()[0]["description"]
