"""The workflows and the composite action: third-party linters, then the rules they cannot see.

actionlint (with shellcheck on the run: scripts when it is installed), zizmor (offline) and
check-jsonschema must all be clean. The structural tests pin the security properties the docs
promise: pinned remote actions, no expressions inside scripts, least privilege, timeouts,
persist-credentials: false, one queue per GPU, and `uses: ./` given only inputs action.yml has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT
from ruamel.yaml import YAML

from ds4ci.options import values as v

BIN = Path(sys.executable).parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTION = ROOT / "action.yml"
REMOTE_USES = re.compile(r"^[\w.-]+/[\w.-]+(/[^@]*)?@(?P<ref>[^\s#]+)$")


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return path


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    # A token in the environment would make zizmor go online; the lint must be offline and stable.
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def _steps() -> list[tuple[str, str, dict[str, Any]]]:
    """(file, job, step) for every step of every workflow and of the composite action."""
    out = []
    for wf in WORKFLOWS:
        for job_id, job in _load(wf)["jobs"].items():
            out += [(wf.name, job_id, step) for step in job.get("steps", [])]
    out += [("action.yml", "-", step) for step in _load(ACTION)["runs"]["steps"]]
    return out


def test_workflow_files_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gate.yml", "report.yml"}


def test_actionlint_is_clean() -> None:
    proc = _run(_tool("actionlint"), "-no-color", "-oneline")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_actionlint_runs_shellcheck_on_scripts(tmp_path: Path) -> None:
    # Proves the clean result above includes shellcheck: a script bug in a copy is reported.
    bad = tmp_path / ".github" / "workflows"
    bad.mkdir(parents=True)
    (bad / "bad.yml").write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    timeout-minutes: 1\n"
        "    steps:\n      - run: echo $UNQUOTED_VAR_WITH_SPACES\n"
    )
    proc = subprocess.run([_tool("actionlint"), "-no-color", "-oneline", str(bad / "bad.yml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "shellcheck" in proc.stdout, proc.stdout + proc.stderr


def test_zizmor_is_clean() -> None:
    proc = _run(_tool("zizmor"), "--offline", "--no-progress", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_catches_template_injection_in_a_run_script(tmp_path: Path) -> None:
    # Guards against a config that silently disables the audits we rely on.
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text(
        "on: pull_request\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    timeout-minutes: 1\n"
        "    steps:\n      - run: echo \"${{ github.event.pull_request.title }}\"\n"
    )
    proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", "."], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "template-injection" in proc.stdout + proc.stderr


def _documented_actionlint_suppression() -> str:
    """The `.github/actionlint.yaml` block docs/adopting.md gives adopters for the caller (the one tested here)."""
    text = (ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(paths:\n.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one actionlint `paths:` block in docs/adopting.md, found {len(blocks)}"
    return str(blocks[0])


@pytest.mark.parametrize("at", ["v0.1.0", "a" * 40], ids=["tag-pin", "commit-pin"])
def test_the_caller_init_writes_is_lint_clean_and_asks_for_what_the_called_jobs_need(tmp_path: Path, at: str) -> None:
    """init's short gate.yml, pinned to a tag or to a commit: actionlint (with the suppression docs/adopting.md
    gives, and no other), zizmor (the tag pin's suppression is on its `uses:` line) and the schema are clean,
    and its one job grants exactly the permissions the called workflow's jobs ask for (a called job gets no
    more than its caller allows).

    actionlint's advice to set `cache-mode` on the calling job is not taken: act (the local runs, `ds4ci
    rehearse`) rejects the key, and the called workflow uses no cache."""
    from ds4ci.commands import caller

    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # actionlint lints a repository's workflows
    text = caller.render(f"acme/ds4ci@{at}")
    (folder / "gate.yml").write_text(text)
    assert ("zizmor: ignore[unpinned-uses]" in text) == (at == "v0.1.0")  # a commit pin needs none
    env = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    bare = subprocess.run([_tool("actionlint"), "-no-color", "-oneline"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert bare.returncode == 1 and bare.stdout.count("\n") == 1 and "[cache-call-unrestricted]" in bare.stdout, \
        bare.stdout + bare.stderr  # the one finding the documented suppression is for
    (tmp_path / ".github" / "actionlint.yaml").write_text(_documented_actionlint_suppression())
    for cmd in ([_tool("actionlint"), "-no-color", "-oneline"],
                [_tool("zizmor"), "--offline", "--no-progress", "."],
                [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(folder / "gate.yml")]):
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, (cmd[0], proc.stdout + proc.stderr)
    wanted: dict[str, str] = {}
    for job in _load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"].values():
        for scope, level in (job.get("permissions") or {}).items():
            wanted[scope] = "write" if "write" in (level, wanted.get(scope)) else level
    (job,) = _load(folder / "gate.yml")["jobs"].values()
    assert job["permissions"] == wanted


def test_workflows_match_the_github_workflow_schema() -> None:
    proc = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                *[str(p) for p in WORKFLOWS])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_action_matches_the_github_action_schema() -> None:
    proc = _run(_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(ACTION))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_expression_inside_any_run_script() -> None:
    offenders = [f"{f}:{job}:{step.get('name', step['run'][:40])}" for f, job, step in _steps()
                 if "run" in step and "${{" in step["run"]]
    assert offenders == []


def test_every_remote_action_is_pinned_by_full_sha_with_a_version_comment() -> None:
    texts = {p.name: p.read_text() for p in [*WORKFLOWS, ACTION]}
    for _, _, step in _steps():
        uses = step.get("uses")
        if uses is None or uses.startswith("./"):
            continue
        m = REMOTE_USES.match(uses)
        assert m and re.fullmatch(r"[0-9a-f]{40}", m.group("ref")), f"{uses} is not pinned by a full SHA"
        assert any(re.search(re.escape(uses) + r" # v\d", t) for t in texts.values()), f"{uses}: no # vX comment"


def test_permissions_are_empty_at_the_top_and_minimal_per_job() -> None:
    writers = {}
    for wf in WORKFLOWS:
        doc = _load(wf)
        assert doc.get("permissions") == {}, f"{wf.name}: top-level permissions must be {{}}"
        for job_id, job in doc["jobs"].items():
            assert "permissions" in job, f"{wf.name}:{job_id} has no explicit permissions"
            assert "timeout-minutes" in job, f"{wf.name}:{job_id} has no timeout-minutes"
            granted = {k for k, v in job["permissions"].items() if v == "write"}
            if granted:
                writers[f"{wf.name}:{job_id}"] = granted
    assert writers == {
        "gate.yml:publish": {"statuses", "checks", "pull-requests"},  # checks: one check run per runner
        "report.yml:report": {"pull-requests"},
        "release.yml:github-release": {"contents"},
        "release.yml:pypi": {"id-token"},
    }


def test_release_builds_checks_attaches_and_publishes_only_through_trusted_publishing() -> None:
    doc = _load(ROOT / ".github" / "workflows" / "release.yml")
    assert (doc.get("on") or doc.get(True))["push"]["tags"] == ["v*"]
    jobs = doc["jobs"]
    build = "\n".join(step.get("run", "") for step in jobs["build"]["steps"])
    for needed in ("python\" -m build --outdir dist", "twine\" check --strict dist/*", "-m venv \"$RUNNER_TEMP/check-venv\"",
                   "pip install --quiet --disable-pip-version-check dist/*.whl", "\"$ds4ci\" --help"):
        assert needed in build, needed
    # id-token: write only where PyPI is published, and that job runs only when the repository opts in.
    holders = [name for name, job in jobs.items() if job["permissions"].get("id-token") == "write"]
    assert holders == ["pypi"]
    assert jobs["pypi"]["if"] == "vars.PYPI_PUBLISH == 'true'" and jobs["pypi"]["environment"]["name"] == "pypi"
    (publish,) = [s for s in jobs["pypi"]["steps"] if str(s.get("uses", "")).startswith("pypa/gh-action-pypi-publish@")]
    assert "with" not in publish or "password" not in publish["with"]  # no stored token
    assert jobs["github-release"]["needs"] == jobs["pypi"]["needs"] == "build"


def test_every_checkout_drops_credentials() -> None:
    for f, job, step in _steps():
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{f}:{job}"


# actions/checkout v7.0.1 (tag v7.0.1 of github.com/actions/checkout, read from its tags and CHANGELOG.md: v7.0.0
# "Block checking out fork PR for pull_request_target and workflow_run", #2454; backported to v6.1.0).
CHECKOUT_WITH_GUARD = "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1"


def test_checkout_is_a_release_with_the_fork_guard_and_only_the_pr_s_code_opts_out_of_it_with_the_reason() -> None:
    """checkout v6.1+/v7 refuses a fork PR's head under pull_request_target unless the step sets
    allow-unsafe-pr-checkout: true. The step that checks the head out (data, run only in the sandbox) says so and
    why; no other checkout (ds4ci, the trusted settings) opts out."""
    for path in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        lines = path.read_text().splitlines()
        pins = [line.split("uses:", 1)[1].strip() for line in lines if "uses: actions/checkout@" in line]
        assert pins and all(pin == CHECKOUT_WITH_GUARD for pin in pins), (path.name, pins)
        for i, line in enumerate(lines):
            if "allow-unsafe-pr-checkout" in line:
                reason = " ".join(lines[i - 3:i])
                assert line.strip().startswith("allow-unsafe-pr-checkout: true # zizmor: ignore[unsafe-checkout]")
                assert "sandbox" in reason, (path.name, reason)
    opted = [(f, job, step["with"]["ref"]) for f, job, step in _steps()
             if str(step.get("uses", "")).startswith("actions/checkout@")
             and step.get("with", {}).get("allow-unsafe-pr-checkout") is True]
    assert opted == [("gate.yml", "gate", "${{ needs.plan.outputs.head-sha }}")], opted


def test_gate_queues_per_pull_request_and_runner_and_never_cancels_another_pull_request() -> None:
    """Defect: one group per GPU across PRs; GitHub keeps one pending job per group, so PR B's push cancelled
    PR A's queued gate. Now the group is one PR's on one runner: only that PR's own older queued run is replaced."""
    job = _load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]["gate"]
    assert job["concurrency"] == {
        "group": "ds4ci-gate-${{ matrix.runner }}-${{ needs.plan.outputs.pr || needs.plan.outputs.head-sha }}",
        "cancel-in-progress": False}
    assert job["runs-on"] == "${{ matrix.labels }}"
    assert job["strategy"]["fail-fast"] is False
    assert job["env"]["DS4_MODEL_DIR"] == "${{ vars.DS4_MODEL_DIR }}"


def test_the_gate_runs_the_base_branch_s_definition_and_forks_wait_for_a_maintainer() -> None:
    """Defect: `on: pull_request` ran the PR's own gate.yml, which the PR could edit to read the runner key."""
    doc = _load(ROOT / ".github" / "workflows" / "gate.yml")
    assert set(doc["on"]) == {"pull_request_target", "merge_group", "workflow_dispatch", "workflow_call"}
    assert doc["on"]["pull_request_target"] == {"types": ["opened", "synchronize", "reopened"]}
    assert doc["on"]["merge_group"] == {"types": ["checks_requested"]}
    # Called, its only input is the ds4ci it was called at; a dispatch's inputs come from the caller's event.
    assert set(doc["on"]["workflow_call"]["inputs"]) == {"ds4ci-ref"}
    assert "ds4ci-ref" not in doc["on"]["workflow_dispatch"]["inputs"]  # no dispatcher picks the ds4ci
    assert doc["run-name"] == ("ds4ci gate ${{ github.event.inputs.head-sha || github.event.pull_request.head.sha "
                               "|| github.event.merge_group.head_sha }}")
    jobs = doc["jobs"]
    approve = jobs["approve"]
    assert approve["if"] == "needs.plan.outputs.fork == 'true'" and approve["environment"] == "ds4ci-fork-review"
    assert approve["permissions"] == {"actions": "read"}
    assert "/approvals" in approve["steps"][0]["run"] and "exit 1" in approve["steps"][0]["run"]
    gate = jobs["gate"]
    assert gate["needs"] == ["plan", "approve"]
    assert jobs["publish"]["needs"] == ["plan", "approve", "gate"]  # it says when a fork's run was held back
    assert "needs.plan.outputs.fork == 'false' || needs.approve.result == 'success'" in gate["if"]
    assert jobs["publish"]["if"] == "always() && needs.plan.result == 'success'"  # forks get real statuses
    (plan,) = [s for s in jobs["plan"]["steps"] if s.get("id") == "plan"]
    assert "--refuse-definition-changes" in plan["run"] and "--trusted-workflow .github/workflows/gate.yml" in plan["run"]
    # The head is data: checked out without credentials, never the working directory of a trusted step.
    for job in jobs.values():
        for step in job.get("steps", []):
            assert step.get("working-directory") is None
    (subject,) = [s for s in gate["steps"] if s.get("with", {}).get("path") == "subject"]
    assert subject["with"]["persist-credentials"] is False


def test_every_python_a_trusted_step_starts_is_isolated() -> None:
    """Defect: `python -c` in the PR checkout imported a committed json.py outside the sandbox."""
    for f, job, step in _steps():
        if f not in ("gate.yml", "report.yml", "action.yml"):  # the workflows init ships, and the action
            continue
        for line in step.get("run", "").splitlines():
            if re.search(r"(python3?\"?|DS4CI_PY\"?) (-m|-c)", line):
                assert re.search(r"(python3?\"?|DS4CI_PY\"?) -I ", line), f"{f}:{job}: {line.strip()}"


def test_the_matrix_is_computed_from_the_trusted_config_in_the_plan_job() -> None:
    """Defect: a hard-coded gfx1151/sm86 matrix; the runners given to init never reached the workflow."""
    jobs = _load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    assert jobs["gate"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    steps = jobs["plan"]["steps"]
    (trusted,) = [s for s in steps if s.get("with", {}).get("path") == "trusted"]
    assert trusted["with"]["ref"] == "${{ steps.settings.outputs.sha }}"  # the default branch's (GITHUB_SHA)
    assert trusted["with"]["sparse-checkout"] == "ds4ci.toml"
    (plan,) = [s for s in steps if s.get("id") == "plan"]
    assert 'dispatch-check --config trusted/ds4ci.toml' in plan["run"] and "--runner-table" not in plan["run"]
    assert 'config runners --config trusted/ds4ci.toml' in plan["run"]
    text = (ROOT / ".github" / "workflows" / "gate.yml").read_text().replace("e.g. gfx1151,sm86", "")
    assert "gfx1151" not in text and "sm86" not in text


def test_every_workflow_names_the_ds4ci_it_runs_once_and_checks_it_as_the_cli_does() -> None:
    """One DS4CI_REF line per workflow (init fills it); the plan's check states values.DS4CI_REF's pattern."""
    for name in ("gate.yml", "report.yml"):
        doc = _load(ROOT / ".github" / "workflows" / name)
        assert doc["env"] == {"DS4CI_REF": ""}, name
        text = (ROOT / ".github" / "workflows" / name).read_text()
        assert text.count('  DS4CI_REF: ""\n') == 1
        assert v.DS4CI_REF.pattern in text, name  # the bash [[ =~ ]] test is the same expression
        assert "OWNER/ds4ci" not in text
        # gate.yml reads a caller's ds4ci-ref once, in the step that resolves the pin; report.yml is never called.
        assert text.count("inputs.ds4ci-ref") == (1 if name == "gate.yml" else 0), name
    jobs = _load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    checkouts = {job: [s["with"] for s in jobs[job]["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")
                       and "path" not in s["with"]] for job in jobs}
    assert checkouts["plan"] == [{"repository": "${{ steps.pin.outputs.repository }}",
                                  "ref": "${{ steps.pin.outputs.ref }}", "persist-credentials": False}]
    for job in ("gate", "publish"):  # ds4ci at the workspace root: `uses: ./` is its action, at the same ref
        assert checkouts[job] == [{"repository": "${{ needs.plan.outputs.ds4ci-repository }}",
                                   "ref": "${{ needs.plan.outputs.ds4ci-ref }}", "persist-credentials": False}], job


def test_local_action_is_called_with_existing_inputs_only() -> None:
    inputs = _load(ACTION)["inputs"]
    required = {k for k, v in inputs.items() if v.get("required") and "default" not in v}
    for f, job, step in _steps():
        if step.get("uses") == "./":
            given = set(step.get("with", {}))
            assert given <= set(inputs), f"{f}:{job}: unknown inputs {given - set(inputs)}"
            assert required <= given, f"{f}:{job}: missing required inputs {required - given}"


def test_action_holds_no_token_refuses_publishing_and_fails_unless_passed() -> None:
    """The job that runs PR code gets no write credential: publishing is a separate job's."""
    action = _load(ACTION)
    assert "token" not in action["inputs"]
    steps = {s.get("id"): s for s in action["runs"]["steps"]}
    for step in steps.values():
        assert "TOKEN" not in " ".join(step.get("env", {})), step.get("name")
        assert "ds4ci\" publish" not in step.get("run", "") and '"$DS4CI" publish' not in step.get("run", "")
    install = steps["install"]["run"]
    assert 'if [[ "$DS4CI_PUBLISH" != "false" ]]' in install and "exit 2" in install
    assert "--bundle-out" in steps["gate"]["run"] and "bundle" in action["outputs"]
    verdict = steps["verdict"]
    assert verdict["if"].startswith("always()")
    assert '"$DS4CI_EXIT_CODE" != "0"' in verdict["run"] and "exit 1" in verdict["run"]


def test_the_publishing_job_publishes_bundles_and_never_leaves_a_runner_silent() -> None:
    jobs = _load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    assert jobs["gate"]["permissions"] == {"contents": "read"}
    publish = jobs["publish"]
    assert publish["runs-on"] == "ubuntu-latest" and publish["concurrency"]["cancel-in-progress"] is False
    script = "\n".join(s.get("run", "") for s in publish["steps"])
    assert "bundle.tar.gz" in script and "state=error" in script  # no bundle: error, never silence
    assert "busy.json" in script and "state=pending" in script  # a busy runner: pending, never green
    assert "--expect-runner" in script


def test_reporter_never_runs_pull_request_code() -> None:
    doc = _load(ROOT / ".github" / "workflows" / "report.yml")
    assert list(doc["on"]) == ["workflow_run"]
    assert doc["on"]["workflow_run"]["workflows"] == [_load(ROOT / ".github" / "workflows" / "gate.yml")["name"]]
    steps = doc["jobs"]["report"]["steps"]
    checkouts = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    # Only ds4ci is checked out: the pinned ds4ci repository, else this repository's default branch.
    assert [c["with"]["ref"] for c in checkouts] == ["${{ steps.pin.outputs.ref }}"]
    assert [c["with"]["repository"] for c in checkouts] == ["${{ steps.pin.outputs.repository }}"]
    (pin,) = [s for s in steps if s.get("id") == "pin"]
    assert pin["env"] == {"DS4CI_DEFAULT_BRANCH": "${{ github.event.repository.default_branch }}"}
    script = "\n".join(s.get("run", "") for s in steps)
    assert "--no-status" in script and "dispatch-check" in script


def test_reporter_installs_ds4ci_from_its_own_checkout_not_the_adopting_repository() -> None:
    """Defect: it ran `pip install .` in the adopting repository ("Directory '.' is not installable")."""
    steps = _load(ROOT / ".github" / "workflows" / "report.yml")["jobs"]["report"]["steps"]
    (checkout,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    installs = [s["run"] for s in steps if "pip install" in s.get("run", "")]
    assert installs and all(f"./{checkout['with']['path']}" in run for run in installs)
    assert not any(re.search(r"pip install\b.*\s\.$", run, re.MULTILINE) for run in installs)
    assert all('name = "ds4ci"' in run for run in installs)  # a clear error when the pin names another repository


def test_gate_workflow_passes_base_trusted_config_and_focused_policy() -> None:
    doc = _load(ROOT / ".github" / "workflows" / "gate.yml")
    for trigger in ("workflow_dispatch",):
        assert doc["on"][trigger]["inputs"]["allow-focused-reruns"]["type"] == "boolean"
    steps = doc["jobs"]["gate"]["steps"]
    (subject,) = [s for s in steps if s.get("with", {}).get("path") == "subject"]
    assert subject["with"]["fetch-depth"] == 0
    (gate,) = [s for s in steps if s.get("uses") == "./"]
    assert gate["with"]["base-ref"] == "${{ steps.base.outputs.base-ref }}"
    publish = doc["jobs"]["publish"]["steps"]
    (trusted,) = [s for s in publish if s.get("with", {}).get("path") == "trusted"]
    assert trusted["with"]["ref"] == "${{ needs.plan.outputs.settings-sha }}"
    (settings,) = [s for s in doc["jobs"]["gate"]["steps"] if s.get("with", {}).get("path") == "trusted"]
    assert settings["with"]["ref"] == "${{ needs.plan.outputs.settings-sha }}"
    (step,) = [s for s in publish if "publish" in s.get("run", "") and "--expect-config" in s["run"]]
    assert step["env"]["DS4CI_ALLOW_FOCUSED"] == "${{ github.event.inputs.allow-focused-reruns }}"
    assert '--expect-config "trusted/$DS4CI_CONFIG"' in step["run"] and "--allow-focused-reruns" in step["run"]
