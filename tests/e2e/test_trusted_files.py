"""Trusted files live outside the checkout, and every later step takes the gate's own trusted settings.

Each test is an attack on 7192a6f: the pull request's build rewrote the trusted settings the gate wrote into the
checkout, and a maintainer's dispatch with bisect then ran them (sandbox off, a build of the PR's choosing); a
bundle made with another [build] or server was published green; the action's junit step wrote through a link the
pull request committed, over the runner's key. The workflow steps run as GitHub runs them (`bash -e`), the CLI as
a user runs it, the link case also as the unprivileged user ``nobody`` (a runner's ordinary user).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asuser
import pytest
from fakegithub import FakeGitHub
from gatekit import DS4CI, Workspace, git_repo
from paths import ROOT
from ruamel.yaml import YAML
from test_bisect import _git as bisect_git
from test_bisect import two_commits
from test_build import build_config
from test_publish_trust import publish
from test_workflow_steps import GATE_YML, _bisect_env, _run, _settings_workspace, _stand_in, _step, _work

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.e2e

ACTION = ROOT / "action.yml"
HOSTILE = ('[gate]\nwidths = [2]\n[sandbox]\nenabled = false\nrequire = false\n'
           '[build]\ncommand = "cp ~/.ds4ci/key.pem /tmp/stolen"\nserver_bin = "out/dflash_server"\n')
NOBODY = 65534
SITE = sysconfig.get_paths()["purelib"]  # this venv's packages (ds4ci is installed editable from the checkout)
KEY = "-----BEGIN PRIVATE KEY-----\nRUNNER-KEY-MARKER\n-----END PRIVATE KEY-----\n"


# --- (a) the settings the bisect reads are the gate's, whatever the build wrote ------------------------------------

def test_the_prs_build_rewriting_the_checkout_never_changes_the_settings_the_bisect_step_reads(tmp_path: Path) -> None:
    """Attack (critical, 7192a6f): the settings step wrote subject/.ds4ci-trusted.toml; the PR's build (which may
    write the whole checkout) rewrote it with the sandbox off and a build of its own, and the bisect step of a
    maintainer's dispatch ran `ds4ci bisect --config` on that file."""
    workspace, _ = _settings_workspace(tmp_path)
    trusted = (workspace / "trusted" / "ds4ci.toml").read_text()
    subject = workspace / "subject"
    before = sorted(subject.rglob("*"))
    proc, outputs = _run(_step(GATE_YML, "settings", "gate"), tmp_path, workspace, {"DS4CI_CONFIG": "ds4ci.toml"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(subject.rglob("*")) == before  # the settings step wrote nothing into the checkout
    # the pull request's build writes every file of the checkout, and the name the trusted settings used to have
    for path in [p for p in subject.rglob("*") if p.is_file()] + [subject / ".ds4ci-trusted.toml"]:
        path.write_text(HOSTILE)
    work = _work(tmp_path)
    (tmp_path / "results").mkdir()
    seen = tmp_path / "seen.toml"
    stand_in = _stand_in(tmp_path, f'while [ $# -gt 0 ]; do if [ "$1" = --config ]; then cat -- "$2" > "{seen}"; fi; '
                                   'shift; done; echo "{}"; exit 1')
    env = _bisect_env(tmp_path, work, stand_in, DS4CI_CONFIG=outputs["config"],
                      DS4CI_CONFIG_BASE=outputs.get("config-base", ""))
    proc, _ = _run(_step(ACTION, "bisect"), tmp_path, subject, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert seen.read_text() == trusted  # the gate's trusted settings, not what the build wrote
    config = Path(outputs["config"])
    assert config.is_absolute() and not config.is_relative_to(workspace) and config.is_relative_to(tmp_path)
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("--config-base") + 1] == "."  # its relative paths are still read in the checkout


# --- (b) bisect refuses the sandbox off under Actions -------------------------------------------------------------

def _two_commit_repo(root: Path) -> tuple[Path, str]:
    repo = root / "engine"
    good = git_repo(repo, {"engine.c": "/* 0 */\n"})
    (repo / "engine.c").write_text("/* 1 */\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "one more"], check=True)
    return repo, good


@pytest.mark.parametrize("settings", ["enabled = false\nrequire = false\n", "enabled = false\n", "require = false\n"])
def test_bisect_under_actions_refuses_a_config_that_turns_the_sandbox_off(tmp_path: Path, settings: str) -> None:
    """Attack (critical, 7192a6f): `[sandbox] enabled = false, require = false` was accepted under Actions, so the
    PR's [build] command ran unsandboxed as the runner's user and read its key."""
    repo, good = _two_commit_repo(tmp_path)
    config = tmp_path / "trusted" / "ds4ci.toml"
    config.parent.mkdir()
    config.write_text(f"[gate]\nwidths = [2]\n[sandbox]\n{settings}")
    evidence = tmp_path / "evidence"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DS4CI"))}
    proc = subprocess.run([DS4CI, "bisect", "--config", str(config), "--config-base", ".", "--good", good,
                           "--evidence-dir", str(evidence)], cwd=repo, env={**env, "GITHUB_ACTIONS": "true"},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[sandbox]" in proc.stderr and "refused under GitHub Actions" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not evidence.exists()


def test_bisect_under_actions_refuses_a_config_inside_the_checkout(tmp_path: Path) -> None:
    """After the gate ran the PR's build in the checkout, a config file in it is the build's to rewrite."""
    repo, good = _two_commit_repo(tmp_path)
    (repo / "ds4ci.toml").write_text("[gate]\nwidths = [2]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DS4CI"))}
    proc = subprocess.run([DS4CI, "bisect", "--config", "ds4ci.toml", "--good", good], cwd=repo,
                          env={**env, "GITHUB_ACTIONS": "true"}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2 and "lies inside the checkout" in proc.stderr, proc.stderr


# --- (c) publish compares [build] and server with the trusted config ----------------------------------------------

def _published(tmp_path: Path, ran: Path, trusted: Path, ws: Workspace, **overrides: Any) -> dict[str, Any]:
    run = ws.gate(widths="2", server_bin=None, config=ran, **overrides)
    assert run.results is not None and run.code == 0, run.stdout + run.stderr
    head = run.results["revisions"]["head"]["sha"]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(42, head, [head])
        proc = publish(fake, run.results["evidence"]["dir"], "--expect-config", str(trusted))
        assert proc.returncode == 0, proc.stderr
        (status,) = fake.statuses()
        (comment,) = fake.comments(42)
    finally:
        fake.stop()
    return {"status": status, "comment": comment["body"]}


def test_a_bundle_built_with_another_build_command_than_the_trusted_config_is_an_error(tmp_path: Path) -> None:
    """Attack (critical, 7192a6f): the bisect's bundle was built by the command of the PR's rewritten config, and
    publish's expectation check never compared [build]: green."""
    ws = Workspace.create(tmp_path)
    trusted = build_config(ws, steps=1)
    copy = tmp_path / "trusted.toml"
    shutil.copy(trusted, copy)
    trusted.write_text(trusted.read_text().replace('command = "./build.sh"', 'command = "./build.sh && true"'))
    found = _published(tmp_path, trusted, copy, ws)
    assert found["status"]["state"] == "error", found
    assert "build.command" in found["status"]["description"] + found["comment"], found
    assert "made with settings the trusted config does not allow" in found["comment"]


def test_a_bundle_of_the_simulator_where_the_trusted_config_runs_a_program_is_an_error(tmp_path: Path) -> None:
    """The PR's config said `server = "simulator"` (which always passes): never green against the trusted config."""
    ws = Workspace.create(tmp_path)
    trusted = tmp_path / "trusted.toml"
    trusted.write_text("[gate]\nwidths = [2]\n")
    ran = tmp_path / "ran.toml"
    ran.write_text('[gate]\nwidths = [2]\nserver = "simulator"\n')
    found = _published(tmp_path, ran, trusted, ws)
    assert found["status"]["state"] == "error", found
    assert "server" in found["status"]["description"] + found["comment"], found
    assert "made with settings the trusted config does not allow" in found["comment"]


# --- (d) ds4ci's own output: never inside the checkout, never through a link -------------------------------------

@pytest.fixture(params=asuser.USERS)
def user(request: pytest.FixtureRequest) -> str:
    return asuser.require(str(request.param))


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder ``nobody`` can own (pytest's own folders are root's alone)."""
    with asuser.scratch("ds4ci-trusted-files-") as folder:
        yield folder


def _as_user(user: str, root: Path) -> tuple[list[str], Path]:
    """The prefix that runs a command as ``user``, and a ds4ci program that user can run (nobody: the system's
    Python with this venv's packages)."""
    if user == "root":
        return [], Path(DS4CI)
    for path in (root, *root.rglob("*")):
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    program = root / "ds4ci-as-user"
    code = f"import site, sys; site.addsitedir({SITE!r}); from ds4ci.cli import main; sys.argv[0] = 'ds4ci'; main()"
    program.write_text(f"#!/bin/sh\nexec /usr/bin/python3 -c {code!r} \"$@\"\n".replace("\"$@\"", '"$@"'))
    program.chmod(0o755)
    os.chown(program, NOBODY, NOBODY)
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], program


def _pr_checkout_with_a_link(root: Path) -> tuple[Path, Path]:
    """A pull request's checkout that commits reports/ds4ci.xml as a link to the runner's key (its user's own file)."""
    key = root / "home" / ".ds4ci" / "runner-key.pem"
    key.parent.mkdir(parents=True)
    key.write_text(KEY)
    checkout = root / "subject"
    (checkout / "reports").mkdir(parents=True)
    (checkout / "reports" / "ds4ci.xml").symlink_to(key)
    git_repo(checkout / "inner", {"x": "x"})  # any git tree
    (checkout / ".git").mkdir()
    return checkout, key


def test_the_junit_step_never_writes_through_a_link_the_pr_committed(scratch: Path, user: str) -> None:
    """Attack (high, 7192a6f): the action's junit-xml step wrote through reports/ds4ci.xml, a link the PR committed,
    and overwrote the runner key with XML holding text the PR chose."""
    checkout, key = _pr_checkout_with_a_link(scratch)
    results = scratch / "results.json"
    shutil.copy(ROOT / "tests" / "data" / "results" / "fail.json", results)
    prefix, ds4ci = _as_user(user, scratch)
    step = _step(ACTION, "junit")
    script = scratch / "step-junit.sh"
    script.write_text(step["run"])
    out = scratch / "github-output"
    out.write_text("")
    os.chown(out, *(NOBODY, NOBODY) if prefix else (0, 0))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "DS4CI"))}
    temp = scratch / "temp"  # the runner's temporary folder, beside the checkout as in _work
    temp.mkdir()
    os.chown(temp, *(NOBODY, NOBODY) if prefix else (0, 0))
    env = {**base, "HOME": str(scratch / "home"), "GITHUB_OUTPUT": str(out), "RUNNER_TEMP": str(temp),
           "DS4CI": str(ds4ci), "DS4CI_RESULTS": str(results), "DS4CI_JUNIT_XML": "reports/ds4ci.xml"}
    proc = subprocess.run([*prefix, "bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert key.read_text() == KEY, proc.stdout + proc.stderr  # the key is untouched
    assert proc.returncode == 2 and "::error::junit-xml: expected a path under $RUNNER_TEMP" in proc.stdout, (
        proc.stdout + proc.stderr)
    assert "junit-xml=" not in out.read_text()


@pytest.mark.parametrize("form", [["report", "--format", "junit", "--output"], ["report", "--output"]])
def test_report_never_writes_through_a_link_outside_any_checkout(scratch: Path, user: str, form: list[str]) -> None:
    """Outside every checkout too, a link at the name (even a dangling one) is refused and its target unchanged."""
    key = scratch / "home" / "runner-key.pem"
    key.parent.mkdir()
    key.write_text(KEY)
    outputs = scratch / "out"
    outputs.mkdir()
    (outputs / "ds4ci.xml").symlink_to(key)
    (outputs / "dangling.xml").symlink_to(scratch / "made-by-the-write")
    results = scratch / "results.json"
    shutil.copy(ROOT / "tests" / "data" / "results" / "fail.json", results)
    prefix, ds4ci = _as_user(user, scratch)
    for name in ("ds4ci.xml", "dangling.xml"):
        proc = subprocess.run([*prefix, str(ds4ci), *form, str(outputs / name), str(results)], capture_output=True,
                              text=True, timeout=120, check=False, env={**os.environ, "HOME": str(scratch / "home")})
        assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stdout + proc.stderr
        assert (outputs / name).is_symlink()
    assert key.read_text() == KEY and not (scratch / "made-by-the-write").exists()
    written = subprocess.run([*prefix, str(ds4ci), *form, str(outputs / "new.xml"), str(results)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert written.returncode == 0 and (outputs / "new.xml").stat().st_size > 0, written.stderr
    assert not [p.name for p in outputs.iterdir() if p.name.endswith(".tmp")]  # the temporary file was renamed


def test_gate_refuses_its_outputs_inside_the_checkout_before_anything_runs(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    checkout = ws.checkout()
    for flags in (["--junit-xml", str(checkout / "junit.xml")], ["--bundle-out", str(checkout / "b.tar.gz")]):
        run = ws.gate(*flags, widths="2")
        assert run.code == 2 and "inside the checkout" in run.stderr, run.stderr
        assert not (ws.root / "evidence").exists()
    run = ws.gate(widths="2", results_out=checkout / "results.json")
    assert run.code == 2 and "--results-out" in run.stderr and "inside the checkout" in run.stderr, run.stderr


# --- no trusted write into the checkout in action.yml and the workflows ----------------------------------------

# A write is a shell redirection (`>`, `>>`), `tee`, a `cp`/`mv`/`install` destination, or a ds4ci option that names
# where ds4ci writes. It is allowed only where no pull-request process can have written: the runner's temporary
# folder ($RUNNER_TEMP, or the action's work folder made by mktemp in it), the files GitHub reads the step's outputs,
# environment and summary from, or /dev/null. Anything else (a relative path: the working directory is the checkout;
# a path an input names) is a trusted write into the checkout.
_WRITE_OPTIONS = ("--output", "--junit-xml", "--results-out", "--bundle-out", "--verdicts-out", "--evidence-dir",
                  "--dry-run-dir", "--github-output")
_SAFE_ROOTS = ('"$RUNNER_TEMP', "$RUNNER_TEMP", '"$GITHUB_OUTPUT"', '"$GITHUB_ENV"', '"$GITHUB_STEP_SUMMARY"',
               "/dev/null", '"$DS4CI_WORK', '"$work', '"$(mktemp -d "$RUNNER_TEMP/')
_TO = r'("[^"]*"|\S+)'


def _destinations(script: str) -> list[str]:
    script = re.sub(r"(?m)^\s*#.*$", "", script)  # comments
    script = re.sub(r"\(\(.*?\)\)", "", script)  # arithmetic: (( n > 0 ))
    found = re.findall(r"(?<![0-9&<>-])>>?(?!&)\s*" + _TO, script)  # > and >> (not 2>&1, not ->)
    found += re.findall(r"\btee\s+(?:-a\s+)?" + _TO, script)
    found += re.findall(r"(?:^|[\s;&|(])(?:cp|mv)\s+(?:--\s+)?\S+\s+" + _TO, script, flags=re.M)
    for option in _WRITE_OPTIONS:
        found += re.findall(re.escape(option) + r"[ =]" + _TO, script)
    return found


def _resolved(dest: str, script: str, env: dict[str, str]) -> bool:
    """Is ``dest`` a place outside the checkout: under a safe root, or a variable set only to such places."""
    if dest.startswith(_SAFE_ROOTS):
        return True
    name = re.fullmatch(r'"?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?(?:/[^"]*)?"?', dest)
    if name is None:
        return False
    var = name.group(1)
    if var in env:  # a step env value: a place the workflow gives (an expression under runner.temp)
        return any(place in env[var] for place in ("runner.temp", "steps.install.outputs.work",
                                                   "steps.install.outputs.evidence-dir"))
    values = [v.strip() for v in re.findall(rf"(?:^|[\s;(]){var}=(.*)$", script, flags=re.M)]
    return bool(values) and all(_resolved(v, script, env) or _results_place(v) for v in values)


def _results_place(value: str) -> bool:
    """The action's results folder: its work folder, or results-out, which its install step requires to lie under
    $RUNNER_TEMP."""
    return value in ('"${DS4CI_RESULTS_OUT:-$DS4CI_WORK/results/results.json}"',
                     '"$(dirname -- "${DS4CI_RESULTS_OUT:-$DS4CI_WORK/results/results.json}")"',
                     '"$(dirname -- "$results")/bundle.tar.gz"', '"$(dirname -- "$DS4CI_RESULTS")/bisect.json"')


def _run_steps() -> Iterator[tuple[str, dict[str, Any]]]:
    action = YAML(typ="safe").load(ACTION.read_text())
    for step in action["runs"]["steps"]:
        yield f"action.yml: {step.get('name')}", step
    for flow in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        doc = YAML(typ="safe").load(flow.read_text())
        for job_name, job in doc["jobs"].items():
            for step in job.get("steps", []):
                yield f"{flow.name}: {job_name}: {step.get('name')}", step


def test_no_trusted_step_writes_into_the_checkout() -> None:
    unsafe = []
    for where, step in _run_steps():
        script = step.get("run")
        if not script:
            continue
        env = {k: str(v) for k, v in (step.get("env") or {}).items()}
        for dest in _destinations(script):
            if not _resolved(dest, script, env):
                unsafe.append(f"{where}: writes {dest}")
    assert not unsafe, "\n".join(unsafe)


def test_the_grep_finds_a_write_into_the_checkout_where_there_is_one() -> None:
    """The check above is no check unless it sees the writes gate.yml made on 7192a6f."""
    old = '(set -o noclobber; cat -- "trusted/$DS4CI_CONFIG" > "subject/$trusted")'
    assert _destinations(old) == ['"subject/$trusted"'] and not _resolved('"subject/$trusted"', old, {})
    junit = '"$DS4CI" report --format junit --output "$DS4CI_JUNIT_XML" "$DS4CI_RESULTS"'
    assert not _resolved(_destinations(junit)[0], junit, {"DS4CI_JUNIT_XML": "${{ inputs.junit-xml }}"})


@pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox: {sandbox.refusal()}")
def test_each_bisect_step_runs_the_trusted_config_kept_outside_the_tree_not_the_commits_own(tmp_path: Path) -> None:
    """The commit under test rewrites the repository's ds4ci.toml (another build command); bisect, given the
    trusted config from outside the repository with --config-base, builds with the trusted command."""
    ws = Workspace.create(tmp_path / "files")
    shas = two_commits(tmp_path, ws, "clean")
    repo = tmp_path / "engine"
    trusted = tmp_path / "temp" / "ds4ci-trusted" / "ds4ci.toml"
    trusted.parent.mkdir(parents=True)
    shutil.copy(repo / "ds4ci.toml", trusted)
    marker = tmp_path / "the-commit's-own-build-ran"
    (repo / "evil.sh").write_text(f"#!/bin/sh\ntouch '{marker}'\n./build.sh\n")
    (repo / "evil.sh").chmod(0o755)
    (repo / "ds4ci.toml").write_text((repo / "ds4ci.toml").read_text().replace("./build.sh", "./evil.sh"))
    bisect_git(repo, "add", "-A")
    bisect_git(repo, "commit", "-qm", "its own build")
    proc = subprocess.run([DS4CI, "bisect", "--good", shas[0], "--runner", "box", "--config", str(trusted),
                           "--config-base", ".", "--evidence-dir", str(tmp_path / "evidence"), "--json"], cwd=repo,
                          env=ws.env(DS4CI_CONTAINMENT="sandbox"), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 1 and "the bad end passes" in proc.stderr, proc.stdout + proc.stderr[-3000:]
    assert not marker.exists()  # the trusted build command ran, not the commit's
    steps = json.loads(proc.stdout)["steps"]
    assert bisect_git(repo, "rev-parse", "HEAD") in [s["sha"] for s in steps], steps  # the commit with its own build
    for step in steps:
        results = json.loads((Path(step["evidence"]) / "results.json").read_text())
        assert results["build"]["command"] == "./build.sh" and results["containment"] == "sandbox"


@pytest.mark.parametrize(("name", "value"), [("DS4CI_RESULTS_OUT", "results.json"),
                                             ("DS4CI_RESULTS_OUT", "/elsewhere/results.json"),
                                             ("DS4CI_EVIDENCE_DIR", "ds4ci-evidence")])
def test_the_action_refuses_results_or_evidence_outside_the_runners_temporary_folder(tmp_path: Path, name: str,
                                                                                     value: str) -> None:
    env = {"DS4CI_PYTHON": "false", "DS4CI_RUNNER": "gfx1151", "DS4CI_PUBLISH": "false", "DS4CI_EVIDENCE_DIR": "",
           "DS4CI_COMMENT_MODE": "", "DS4CI_RESULTS_OUT": "", name: value}
    proc, outputs = _run(_step(ACTION, "install"), tmp_path, tmp_path / "..", env)
    assert proc.returncode == 2 and outputs == {}, proc.stdout + proc.stderr
    assert "expected an absolute path under $RUNNER_TEMP" in proc.stdout
