"""The trusted steps of action.yml and gate.yml, run as GitHub runs them: `bash --noprofile --norc -eo pipefail`.

Each step's `run:` script is taken from the file and executed with its `env:` (expressions replaced by the
values a job would give), a $GITHUB_OUTPUT and $GITHUB_ENV file, and the step's working directory. Where
ds4ci's own CLI would need a GPU runner, a small stand-in program plays it (it only prints and exits as
ds4ci does); the isolation cases run the real Python and the real ds4ci package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakegithub import WRITE_TOKEN, FakeGitHub
from paths import ROOT
from ruamel.yaml import YAML

BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]  # GitHub's `shell: bash`


def _step(path: Path, step_id: str, job: str | None = None) -> dict[str, Any]:
    doc = YAML(typ="safe").load(path.read_text())
    steps = doc["runs"]["steps"] if job is None else doc["jobs"][job]["steps"]
    (step,) = [s for s in steps if s.get("id") == step_id]
    return dict(step)


def _run(step: dict[str, Any], tmp: Path, cwd: Path, env: dict[str, str],
         shell: list[str] = BASH) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    script = tmp / f"step-{step['id']}.sh"
    script.write_text(step["run"])
    out = tmp / f"output-{step['id']}"
    out.write_text("")
    (tmp / "github-env").touch()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "DS4CI"))}
    declared = {k: "" for k in step.get("env") or {}}  # GitHub sets every key a step declares (an empty value too)
    full = {**base, "GITHUB_OUTPUT": str(out), "GITHUB_ENV": str(tmp / "github-env"), "RUNNER_TEMP": str(tmp),
            **declared, **env}
    proc = subprocess.run([*shell, str(script)], cwd=cwd, env=full, capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    return proc, outputs


def _stand_in(tmp: Path, body: str) -> Path:
    """A program in ds4ci's place: ``body`` is a bash script; it also records its arguments."""
    path = tmp / "ds4ci-stand-in"
    path.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > "{tmp}/argv"\n{body}\n')
    path.chmod(0o755)
    return path


def _work(tmp: Path) -> Path:
    """$DS4CI_WORK as the install step makes it, with venv/bin/python running this test suite's Python."""
    work = tmp / "work"
    (work / "venv" / "bin").mkdir(parents=True)
    py = work / "venv" / "bin" / "python"
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return work


def _hostile_checkout(tmp: Path) -> tuple[Path, Path]:
    """A pull request's checkout that commits json.py and a ds4ci/ package; both would leave a marker if imported."""
    checkout = tmp / "subject"
    marker = tmp / "imported-pr-code"
    (checkout / "ds4ci" / "evidence").mkdir(parents=True)
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (checkout / "json.py").write_text(code + "def load(f): return {'busy': {'busy': True}}\n")
    (checkout / "ds4ci" / "__init__.py").write_text(code)
    (checkout / "ds4ci" / "evidence" / "__init__.py").write_text("")
    (checkout / "ds4ci" / "evidence" / "results.py").write_text(code + "def load(p): return {'verdict': 'pass'}\n")
    return checkout, marker


BUSY = json.dumps({"ready": False, "busy": {"busy": True, "summary": "pid 42 holds the GPU"}})


def _preflight_env(tmp: Path, work: Path, stand_in: Path) -> dict[str, str]:
    return {"DS4CI": str(stand_in), "DS4CI_PY": str(work / "venv" / "bin" / "python"), "DS4CI_CONFIG": "ds4ci.toml",
            "DS4CI_CONFIG_BASE": "", "DS4CI_RUNNER": "gfx1151", "DS4CI_WORK": str(work),
            "DS4CI_RESULTS_OUT": str(tmp / "results" / "results.json")}


def test_a_busy_runner_leaves_its_record_and_prints_the_report_under_bash_e(tmp_path: Path) -> None:
    """Defect: `"$DS4CI" preflight ... > report; code=$?` ended the step under `bash -e`: no report printed,
    no busy.json, so the publisher posted error instead of pending."""
    work = _work(tmp_path)
    checkout = tmp_path / "subject"
    checkout.mkdir()
    stand_in = _stand_in(tmp_path, f"echo '{BUSY}'; exit 3")
    proc, _ = _run(_step(ROOT / "action.yml", "preflight"), tmp_path, checkout, _preflight_env(tmp_path, work, stand_in))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "pid 42 holds the GPU" in proc.stdout  # the report is printed
    assert json.loads((tmp_path / "results" / "busy.json").read_text())["busy"]["busy"] is True
    assert "::warning::runner gfx1151 is busy" in proc.stdout


def test_a_failed_preflight_that_is_not_busy_prints_its_report_and_leaves_no_busy_record(tmp_path: Path) -> None:
    work = _work(tmp_path)
    checkout = tmp_path / "subject"
    checkout.mkdir()
    stand_in = _stand_in(tmp_path, """echo '{"ready": false, "busy": {"busy": false}, "problems": ["no bwrap"]}'; exit 3""")
    proc, _ = _run(_step(ROOT / "action.yml", "preflight"), tmp_path, checkout, _preflight_env(tmp_path, work, stand_in))
    assert proc.returncode == 3 and "no bwrap" in proc.stdout
    assert not (tmp_path / "results" / "busy.json").exists()


@pytest.mark.parametrize("shell", [BASH, ["bash", "--noprofile", "--norc"]], ids=["bash -e", "bash"])
def test_preflight_never_imports_a_json_py_the_pull_request_committed(tmp_path: Path, shell: list[str]) -> None:
    """Defect (critical): the step's `python -c 'import json ...'` ran in the PR checkout and imported its json.py
    outside the sandbox (it read the runner key). The failing preflight below is what triggered it. Under `bash -e`
    the old step ended before reaching it (the exit-code defect above hid it); without -e it was reached."""
    work = _work(tmp_path)
    checkout, marker = _hostile_checkout(tmp_path)
    stand_in = _stand_in(tmp_path, """echo '{"ready": false, "busy": {"busy": false}}'; exit 3""")
    proc, _ = _run(_step(ROOT / "action.yml", "preflight"), tmp_path, checkout, _preflight_env(tmp_path, work, stand_in),
                   shell)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not marker.exists(), marker.read_text()
    assert not (tmp_path / "results" / "busy.json").exists()  # the PR's json.py said busy; it was not asked


def _gate_env(tmp: Path, work: Path, stand_in: Path, **extra: str) -> dict[str, str]:
    return {"DS4CI": str(stand_in), "DS4CI_WORK": str(work), "DS4CI_EVIDENCE_DIR": str(tmp / "evidence"),
            "DS4CI_CONFIG": str(tmp / "trusted" / "ds4ci.toml"), "DS4CI_CONFIG_BASE": ".", "DS4CI_RUNNER": "gfx1151",
            "DS4CI_WIDTHS": "",
            "DS4CI_RESULTS_OUT": str(tmp / "results" / "results.json"), "DS4CI_SOURCE_DIR": ".",
            "DS4CI_BASE_REF": "", "DS4CI_UPSTREAM_REF": "", "DS4CI_NOTE": "", "DS4CI_SERVICE_SOCKET": "", **extra}


def test_a_failing_gate_still_sets_exit_code_bundle_and_results_under_bash_e(tmp_path: Path) -> None:
    """Defect: `"$DS4CI" gate ...; code=$?` ended the step at exit 1: outputs empty, the verdict step skipped."""
    work = _work(tmp_path)
    (tmp_path / "results").mkdir()
    results = tmp_path / "results"
    stand_in = _stand_in(tmp_path, f"""echo '{{}}' > "{results}/results.json"; echo x > "{results}/bundle.tar.gz"; exit 1""")
    proc, outputs = _run(_step(ROOT / "action.yml", "gate"), tmp_path, tmp_path, _gate_env(tmp_path, work, stand_in))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outputs == {"exit-code": "1", "bundle": str(tmp_path / "results" / "bundle.tar.gz"),
                       "results": str(tmp_path / "results" / "results.json")}


def test_with_a_service_socket_the_gate_is_asked_of_the_service_by_commit(tmp_path: Path) -> None:
    work = _work(tmp_path)
    repo = tmp_path / "subject"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], check=True)
    base = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "head"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    stand_in = _stand_in(tmp_path, "exit 0")
    env = _gate_env(tmp_path, work, stand_in, DS4CI_SERVICE_SOCKET="/run/ds4ci/gfx1151.sock", DS4CI_BASE_REF=base)
    proc, outputs = _run(_step(ROOT / "action.yml", "gate"), tmp_path, repo, env)
    assert proc.returncode == 0 and outputs["exit-code"] == "0", proc.stdout + proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:4] == ["service", "request", "--socket", "/run/ds4ci/gfx1151.sock"]
    given = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert given["--head"] == head and given["--base"] == base and given["--runner"] == "gfx1151"
    assert given["--checkout"] == str(repo.resolve()) and given["--bundle-out"].endswith("bundle.tar.gz")
    assert "gate" not in argv


def _verdict_env(work: Path, results: Path | str, code: str) -> dict[str, str]:
    return {"DS4CI_EXIT_CODE": code, "DS4CI_RESULTS": str(results), "DS4CI_WORK": str(work),
            "DS4CI_PY": str(work / "venv" / "bin" / "python")}


def test_the_verdict_never_imports_a_ds4ci_package_the_build_wrote_in_the_workspace(tmp_path: Path) -> None:
    """Defect (high): in the "Using the action directly" layout the workspace is the PR checkout, and the Verdict
    step's `python -c 'from ds4ci...'` imported a ds4ci/ package written there, which said pass."""
    work = _work(tmp_path)
    workspace, marker = _hostile_checkout(tmp_path)
    results = tmp_path / "results.json"
    results.write_text('{"verdict": "pass"}')  # not a valid results.json: the real ds4ci refuses it
    proc, outputs = _run(_step(ROOT / "action.yml", "verdict"), tmp_path, workspace, _verdict_env(work, results, "0"))
    assert not marker.exists(), marker.read_text()
    assert outputs["verdict"] == "error" and proc.returncode == 1, proc.stdout + proc.stderr


def test_the_verdict_of_a_gate_that_never_ran_is_error(tmp_path: Path) -> None:
    work = _work(tmp_path)
    proc, outputs = _run(_step(ROOT / "action.yml", "verdict"), tmp_path, tmp_path, _verdict_env(work, "", ""))
    assert proc.returncode == 1 and outputs["verdict"] == "error"
    assert "the gate did not run" in proc.stdout


GATE_YML = ROOT / ".github" / "workflows" / "gate.yml"


def _settings_workspace(tmp: Path) -> tuple[Path, Path]:
    workspace = tmp / "workspace"
    (workspace / "trusted").mkdir(parents=True)
    (workspace / "trusted" / "ds4ci.toml").write_text("[gate]\nwidths = [2, 3, 4]\n")
    (workspace / "subject").mkdir()
    (workspace / "subject" / "ds4ci.toml").write_text("[gate]\nwidths = [5]\n")
    victim = tmp / "runner-key.pem"
    victim.write_text("PRIVATE KEY\n")
    return workspace, victim


def test_the_trusted_settings_are_written_outside_the_checkout(tmp_path: Path) -> None:
    """In a fresh folder of $RUNNER_TEMP (the PR's build may write the whole checkout, and a later step reads them
    again); config-base names the folder of the checkout their relative paths start from."""
    workspace, _ = _settings_workspace(tmp_path)
    proc, outputs = _run(_step(GATE_YML, "settings", "gate"), tmp_path, workspace, {"DS4CI_CONFIG": "ds4ci.toml"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = Path(outputs["config"])
    assert config.parent.parent == tmp_path and config.parent.name.startswith("ds4ci-trusted.")
    assert outputs["config-base"] == "." and "this pull request changes ds4ci.toml" in outputs["note"]
    assert config.read_text() == "[gate]\nwidths = [2, 3, 4]\n"
    assert sorted(p.name for p in (workspace / "subject").iterdir()) == ["ds4ci.toml"]
    assert "merge queue" not in outputs["note"]  # a pull request's run gated its head


def test_a_merge_queue_s_run_says_it_gated_the_merge_commit(tmp_path: Path) -> None:
    workspace, _ = _settings_workspace(tmp_path)
    (workspace / "subject" / "ds4ci.toml").write_text("[gate]\nwidths = [2, 3, 4]\n")  # the same settings
    merge = "c" * 40
    proc, outputs = _run(_step(GATE_YML, "settings", "gate"), tmp_path, workspace,
                         {"DS4CI_CONFIG": "ds4ci.toml", "DS4CI_GATED": "merge", "DS4CI_QUEUED_PR": "7",
                          "DS4CI_HEAD_SHA": merge})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outputs["note"] == (f"merge queue: this run gated the merge commit {merge} (the entry of pull request #7), "
                               "not the pull request's head")


SETTINGS_RUN = 4444  # the gate run whose trusted settings' commit is looked up


def _settings_commit(tmp: Path, fake: FakeGitHub, queue_base: str = "") -> tuple[subprocess.CompletedProcess[str],
                                                                                  dict[str, str]]:
    """gate.yml's plan step that names the trusted settings' commit, in run SETTINGS_RUN, against the fake GitHub."""
    env = {"GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_API_URL": fake.url, "GITHUB_REPOSITORY": "acme/engine",
           "GITHUB_RUN_ID": str(SETTINGS_RUN), "DS4CI_QUEUE_BASE_SHA": queue_base,
           "GITHUB_SHA": "e" * 40}  # what an older GitHub (and act) says for pull_request_target: the base's tip
    return _run(_step(GATE_YML, "settings", "plan"), tmp, tmp, env)


@pytest.mark.parametrize("event", ["pull_request_target", "workflow_dispatch"])
def test_the_trusted_settings_commit_is_the_one_github_records_for_the_run(tmp_path: Path, fake: FakeGitHub,
                                                                          event: str) -> None:
    """GitHub runs the default branch's gate.yml for pull_request_target whatever the pull request's base, and
    records the run there (head_sha: the default branch's tip): the settings come from that commit, for a pull
    request into a release branch too, never from the base's (GITHUB_SHA of an older GitHub)."""
    fake.add_branch("main", ["d" * 40])
    fake.add_run(SETTINGS_RUN, event=event, title="ds4ci gate " + "a" * 40)
    proc, outputs = _settings_commit(tmp_path, fake)
    assert proc.returncode == 0 and outputs["sha"] == "d" * 40, proc.stdout + proc.stderr
    assert f"GitHub's record of run {SETTINGS_RUN} (head_sha)" in proc.stdout


@pytest.mark.parametrize("history", [["b" * 40], ["b" * 40, "d" * 40]], ids=["the tip", "behind the tip"])
def test_a_merge_queue_s_trusted_settings_are_its_base_s(tmp_path: Path, fake: FakeGitHub,
                                                         history: list[str]) -> None:
    """The queue's base is used where GitHub's compare says it is in the default branch's history."""
    fake.add_branch("main", history)
    proc, outputs = _settings_commit(tmp_path, fake, queue_base="b" * 40)  # no run record is read
    assert proc.returncode == 0 and outputs["sha"] == "b" * 40, proc.stdout + proc.stderr
    assert "in main's history" in proc.stdout


def test_an_entry_behind_another_takes_the_default_branch_s_tip_not_its_base(tmp_path: Path,
                                                                            fake: FakeGitHub) -> None:
    """Defect (red team): merge_group.base_sha of an entry behind another is the earlier entry's queue commit,
    which holds that pull request's ds4ci.toml; it was taken unchecked as the trusted settings' commit."""
    earlier = "1" * 40  # gh-readonly-queue/main/pr-1-...: main's tip + pull request #1
    fake.add_branch("main", ["d" * 40])
    fake.add_branch("gh-readonly-queue/main/pr-1-" + "b" * 40, ["d" * 40, earlier])
    proc, outputs = _settings_commit(tmp_path, fake, queue_base=earlier)
    assert proc.returncode == 0 and outputs["sha"] == "d" * 40, proc.stdout + proc.stderr
    assert "the default branch main's tip (the merge queue's base " + earlier + " follows it" in proc.stdout


@pytest.mark.parametrize("known", [True, False], ids=["diverged", "unknown to GitHub"])
def test_a_merge_queue_base_outside_the_default_branch_gives_no_trusted_settings(tmp_path: Path, fake: FakeGitHub,
                                                                               known: bool) -> None:
    """A base GitHub cannot place after the default branch's tip, or does not know: no settings, no checkout."""
    other = "1" * 40
    if known:
        fake.add_run(SETTINGS_RUN + 1, event="merge_group", head_sha=other, title=f"ds4ci gate {other}")
    proc, outputs = _settings_commit(tmp_path, fake, queue_base=other)
    assert proc.returncode == 2 and "sha" not in outputs, proc.stdout + proc.stderr
    why = ("is neither in the default branch main's history nor after its tip (compare: 'diverged')" if known
           else "could not compare the default branch main")
    assert why in proc.stdout + proc.stderr


@pytest.mark.parametrize("head_sha", [None, "main", ""], ids=["no such run", "not a commit", "empty"])
def test_no_trusted_settings_commit_without_github_s_record_of_one(tmp_path: Path, fake: FakeGitHub,
                                                                   head_sha: str | None) -> None:
    """GitHub has no record of the run (404), or one without a 40-hex head_sha: fail closed, no checkout follows."""
    if head_sha is not None:
        fake.add_run(SETTINGS_RUN, title="ds4ci gate " + "a" * 40)
        with fake.lock:
            fake._runs[SETTINGS_RUN]["head_sha"] = head_sha
    proc, outputs = _settings_commit(tmp_path, fake)
    assert proc.returncode != 0 and "sha" not in outputs, proc.stdout + proc.stderr


@pytest.mark.parametrize("link", ["file", "dangling", "folder"])
def test_the_trusted_settings_are_never_written_through_a_link_the_pr_committed(tmp_path: Path, link: str) -> None:
    """Defect (medium): `cp trusted/... subject/.ds4ci-trusted.toml` wrote through a committed symlink and overwrote
    the runner key. Now nothing is written into the checkout: a link at the old name, or a dangling one, is never
    touched; a linked config folder is refused (exit 2), since the settings' relative paths would be read there."""
    workspace, victim = _settings_workspace(tmp_path)
    config = "ds4ci.toml"
    if link == "file":
        (workspace / "subject" / ".ds4ci-trusted.toml").symlink_to(victim)
    elif link == "dangling":
        (workspace / "subject" / ".ds4ci-trusted.toml").symlink_to(tmp_path / "new-file")
    else:
        (workspace / "subject" / "ci").symlink_to(tmp_path, target_is_directory=True)
        (tmp_path / "ds4ci.toml").write_text("[gate]\n")
        (workspace / "trusted" / "ci").mkdir()
        (workspace / "trusted" / "ci" / "ds4ci.toml").write_text("[gate]\n")
        config = "ci/ds4ci.toml"
    proc, outputs = _run(_step(GATE_YML, "settings", "gate"), tmp_path, workspace, {"DS4CI_CONFIG": config})
    if link == "folder":
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "::error::" in proc.stdout and "config" not in outputs
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not Path(outputs["config"]).is_relative_to(workspace), outputs
    assert victim.read_text() == "PRIVATE KEY\n"
    assert not (tmp_path / "new-file").exists() and not (tmp_path / ".ds4ci-trusted.toml").exists()


FORK_RUN = 4343  # the workflow run a fork's pull request started


def _approval_step(tmp: Path, fake: FakeGitHub) -> subprocess.CompletedProcess[str]:
    """gate.yml's approve step, in run FORK_RUN of acme/engine, against the fake GitHub."""
    env = {"GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_API_URL": fake.url, "GITHUB_REPOSITORY": "acme/engine",
           "GITHUB_RUN_ID": str(FORK_RUN)}
    proc, _ = _run(_step(GATE_YML, "approval", "approve"), tmp, tmp, env)
    return proc


@pytest.mark.parametrize(("reviews", "approved"), [
    ([], False),  # an environment without required reviewers records no review
    ([("ds4ci-fork-review", "rejected")], False),
    ([("another-environment", "approved")], False),
    ([("another-environment", "approved"), ("ds4ci-fork-review", "approved")], True),
])
def test_a_forks_run_goes_on_only_with_a_recorded_approval_of_its_environment(
    tmp_path: Path, fake: FakeGitHub, reviews: list[tuple[str, str]], approved: bool
) -> None:
    fake.add_run(FORK_RUN, title="ds4ci gate " + "a" * 40)
    for environment, state in reviews:
        fake.add_run_review(FORK_RUN, environment, state)
    proc = _approval_step(tmp_path, fake)
    if approved:
        assert proc.returncode == 0 and "a maintainer approved this fork's run" in proc.stdout, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "::error::no maintainer approved environment ds4ci-fork-review for this run" in proc.stdout


def test_a_fork_run_whose_reviews_cannot_be_read_does_not_go_on(tmp_path: Path, fake: FakeGitHub) -> None:
    """GitHub answers 404 (another run id, or a token without actions: read): fail closed, never a pass."""
    proc = _approval_step(tmp_path, fake)  # no such run recorded
    assert proc.returncode != 0 and "a maintainer approved" not in proc.stdout, proc.stdout + proc.stderr


def test_the_junit_step_writes_the_runs_junit_xml_from_results_json_under_bash_e(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    from gatekit import DS4CI

    results = ROOT / "tests" / "data" / "results" / "fail.json"
    env = {"DS4CI": str(DS4CI), "DS4CI_RESULTS": str(results), "DS4CI_JUNIT_XML": "reports/ds4ci.xml"}
    (tmp_path / "reports").mkdir()
    proc, outputs = _run(_step(ROOT / "action.yml", "junit"), tmp_path, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outputs == {"junit-xml": str((tmp_path / "reports" / "ds4ci.xml").resolve())}
    suite = ET.parse(tmp_path / "reports" / "ds4ci.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "2", ET.tostring(suite)


def test_a_comment_mode_the_publisher_does_not_know_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    env = {"DS4CI_PYTHON": "false", "DS4CI_RUNNER": "gfx1151", "DS4CI_PUBLISH": "false", "DS4CI_EVIDENCE_DIR": "",
           "DS4CI_COMMENT_MODE": "sometimes"}
    proc, outputs = _run(_step(ROOT / "action.yml", "install"), tmp_path, tmp_path, env)
    assert proc.returncode == 2 and outputs == {}, proc.stdout + proc.stderr
    assert "comment-mode: expected always, failures or off (or empty), found 'sometimes'" in proc.stdout


def _bisect_env(tmp: Path, work: Path, stand_in: Path, **extra: str) -> dict[str, str]:
    return {"DS4CI": str(stand_in), "DS4CI_WORK": str(work), "DS4CI_CONFIG": str(tmp / "trusted" / "ds4ci.toml"),
            "DS4CI_CONFIG_BASE": ".", "DS4CI_RUNNER": "gfx1151", "DS4CI_WIDTHS": "3", "DS4CI_SOURCE_DIR": "",
            "DS4CI_BASE_REF": "origin/main",
            "DS4CI_RESULTS": str(tmp / "results" / "results.json"), "DS4CI_SERVICE_SOCKET": "", **extra}


def test_the_bisect_step_writes_its_json_beside_results_and_keeps_its_own_code_as_an_output(tmp_path: Path) -> None:
    work = _work(tmp_path)
    (tmp_path / "results").mkdir()
    stand_in = _stand_in(tmp_path, """echo '{"verdict": "not_found"}'; exit 1""")
    proc, outputs = _run(_step(ROOT / "action.yml", "bisect"), tmp_path, tmp_path, _bisect_env(tmp_path, work, stand_in))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # `bash -e`: the bisect's 1 is an output, not the step's
    found = tmp_path / "results" / "bisect.json"
    assert outputs == {"exit-code": "1", "bisect": str(found)} and json.loads(found.read_text()) == {"verdict": "not_found"}
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[0] == "bisect" and "--json" in argv and argv[argv.index("--repo-dir") + 1] == "."
    assert argv[argv.index("--widths") + 1] == "3" and argv[argv.index("--base-ref") + 1] == "origin/main"
    assert argv[argv.index("--evidence-dir") + 1] == str(work / "bisect-evidence")
    quiet = _stand_in(tmp_path, "echo 'ds4ci: error: --good: no such commit' >&2; exit 2")
    proc, outputs = _run(_step(ROOT / "action.yml", "bisect"), tmp_path, tmp_path, _bisect_env(tmp_path, work, quiet))
    assert proc.returncode == 0 and outputs == {"exit-code": "2"} and not found.exists(), proc.stdout + proc.stderr


def test_the_bisect_step_is_skipped_with_a_warning_under_a_gate_service(tmp_path: Path) -> None:
    work = _work(tmp_path)
    stand_in = _stand_in(tmp_path, "exit 0")
    env = _bisect_env(tmp_path, work, stand_in, DS4CI_SERVICE_SOCKET="/run/ds4ci/gfx1151.sock")
    proc, outputs = _run(_step(ROOT / "action.yml", "bisect"), tmp_path, tmp_path, env)
    assert proc.returncode == 0 and outputs == {} and not (tmp_path / "argv").exists(), proc.stdout + proc.stderr
    assert "::warning::bisect skipped" in proc.stdout


def test_the_publish_job_passes_each_runners_bisect_beside_its_bundle(tmp_path: Path) -> None:
    venv = tmp_path / "ds4ci-venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "ds4ci").write_bytes(_stand_in(tmp_path, "exit 0").read_bytes())
    (venv / "ds4ci").chmod(0o755)
    folders = {r: tmp_path / "ds4ci-results" / f"ds4ci-results-{r}" for r in ("gfx1151", "cuda", "offline")}
    for runner in ("gfx1151", "cuda"):
        folders[runner].mkdir(parents=True)
        (folders[runner] / "bundle.tar.gz").write_bytes(b"x")
    (folders["gfx1151"] / "bisect.json").write_text("{}")
    folders["offline"].mkdir()
    (folders["offline"] / "bisect.json").write_text("{}")  # no bundle beside it: nothing to publish it with
    env = {"GITHUB_TOKEN": WRITE_TOKEN, "DS4CI_PR": "7", "DS4CI_HEAD_SHA": "a" * 40, "DS4CI_RUNNERS": "gfx1151,cuda",
           "DS4CI_RUN_URL": "https://github.invalid/run", "DS4CI_CONFIG": "ds4ci.toml", "DS4CI_ALLOW_FOCUSED": "false",
           "DS4CI_FORK": "false", "DS4CI_APPROVAL": "skipped", "GITHUB_REPOSITORY": "acme/engine"}
    proc, _ = _run(_step(ROOT / ".github" / "workflows" / "gate.yml", "publish", job="publish"), tmp_path, tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    given = [argv[i + 1] for i, a in enumerate(argv) if a == "--bisect"]
    assert given == [str(folders["gfx1151"] / "bisect.json")], argv


def _publish_step(tmp: Path, flag: str, write: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """gate.yml's publish step under bash -e, with a stand-in ds4ci that runs ``write`` (``$j``: the index of
    ``flag``'s value in its argv) and one runner's bundle downloaded."""
    venv = tmp / "ds4ci-venv" / "bin"
    venv.mkdir(parents=True)
    body = (f'for ((i = 1; i <= $#; i++)); do if [[ "${{!i}}" == {flag} ]]; then j=$((i + 1)); {write}; fi; done; '
            "exit 0")
    (venv / "ds4ci").write_bytes(_stand_in(tmp, body).read_bytes())
    (venv / "ds4ci").chmod(0o755)
    folder = tmp / "ds4ci-results" / "ds4ci-results-cuda"
    folder.mkdir(parents=True)
    (folder / "bundle.tar.gz").write_bytes(b"x")
    env = {"GITHUB_TOKEN": WRITE_TOKEN, "DS4CI_PR": "7", "DS4CI_HEAD_SHA": "a" * 40, "DS4CI_RUNNERS": "cuda",
           "DS4CI_RUN_URL": "https://github.invalid/run", "DS4CI_CONFIG": "ds4ci.toml", "DS4CI_ALLOW_FOCUSED": "false",
           "DS4CI_FORK": "false", "DS4CI_APPROVAL": "skipped", "GITHUB_REPOSITORY": "acme/engine"}
    return _run(_step(GATE_YML, "publish", job="publish"), tmp, tmp, env)


@pytest.mark.parametrize("artifact", ["ds4ci-calibrated--cuda=2026-12-04--gfx1151=2026-12-01", None])
def test_the_publish_job_outputs_the_calibration_record_publish_wrote(tmp_path: Path, artifact: str | None) -> None:
    """The step passes --calibration-record and outputs the record's artifact name for the upload step (none when
    no verified bundle cites a calibration: nothing is uploaded)."""
    doc = json.dumps({"artifact": artifact, "calibrated": {}})
    proc, outputs = _publish_step(tmp_path, "--calibration-record", f"printf '%s\\n' '{doc}' > \"${{!j}}\"")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("--calibration-record") + 1] == str(tmp_path / "ds4ci-calibrated.json")
    assert outputs.get("calibrated") == (artifact or "")
    doc_ = YAML(typ="safe").load(GATE_YML.read_text())
    name = "Record the calibrations the verified bundles cite"
    (upload,) = [s for s in doc_["jobs"]["publish"]["steps"] if s.get("name") == name]
    assert upload["with"]["name"] == "${{ steps.publish.outputs.calibrated }}"
    assert upload["if"] == "always() && steps.publish.outputs.calibrated != ''"


@pytest.mark.parametrize(("artifact", "output"), [
    ("ds4ci-comment-81-" + "0123456789abcdef" * 2, "ds4ci-comment-81-" + "0123456789abcdef" * 2),
    ("ds4ci-comment-81", None),  # the id alone (an older record): no text bound to it, nothing uploaded
    ("ds4ci-comment-81-" + "0" * 32 + "\ncalibrated=x", None),  # never a second output line
])
def test_the_publish_job_outputs_the_comment_record_publish_wrote(tmp_path: Path, artifact: str,
                                                                 output: str | None) -> None:
    """The step passes --comment-record and outputs the record's artifact name (the comment's id and its body's
    digest) for the upload step; a name of any other shape is never output, so nothing is uploaded."""
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"comment_id": 81, "sha256": "0" * 64, "artifact": artifact}) + "\n")
    proc, outputs = _publish_step(tmp_path, "--comment-record", f'cp "{record}" "${{!j}}"')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("--comment-record") + 1] == str(tmp_path / "ds4ci-comment.json")
    assert outputs.get("comment-artifact") == output
    assert "calibrated" not in outputs
    for workflow in ("gate.yml", "report.yml"):
        doc = YAML(typ="safe").load((ROOT / ".github" / "workflows" / workflow).read_text())
        (upload,) = [s for job in doc["jobs"].values() for s in job["steps"]
                     if s.get("name") == "Record that ds4ci wrote the comment"]
        assert upload["with"]["name"] == "${{ steps.publish.outputs.comment-artifact }}", workflow
        assert upload["if"] == "always() && steps.publish.outputs.comment-artifact != ''", workflow
