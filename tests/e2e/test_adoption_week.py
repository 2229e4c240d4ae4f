"""An adopter's first week with the real CLI in temporary repositories, nothing preset in the environment.

`init` builds the pull request's head by default ([build] from CMake files, or the command named) or names a
prebuilt binary, never both, and writes [merge]; the simulator is named by the trusted config
(`gate.server = "simulator"`), never by a script's first line; every command reads ./ds4ci.toml by default
(preflight too); `config check` says every problem at once; `ds4ci pin` rewrites pins and nothing else.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_adoption import clean_env, ds4ci, git_init

from ds4ci.options.values import read_toml

pytestmark = pytest.mark.e2e

PRESETS = {
    "version": 6,
    "configurePresets": [{"name": "base", "hidden": True},
                         {"name": "rocm-release", "inherits": "base", "binaryDir": "${sourceDir}/out/${presetName}"}],
    "buildPresets": [{"name": "rocm-release-build", "configurePreset": "rocm-release"}],
}


def _toml(repo: Path) -> dict[str, object]:
    return read_toml(repo / "ds4ci.toml")


def test_init_builds_the_pr_head_from_cmake_presets_by_default(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    (repo / "CMakeLists.txt").write_text("project(e C)\n")
    (repo / "CMakePresets.json").write_text(json.dumps(PRESETS))
    env = clean_env(tmp_path)
    init = ds4ci("init", "--runner", "gfx1151", "--runner", "rtx4090", "--no-workflows", cwd=repo, env=env)
    assert init.returncode == 0, init.stderr
    doc = _toml(repo)
    assert doc["build"] == {"command": "cmake --preset rocm-release && cmake --build --preset rocm-release-build "
                            "--target dflash_server", "server_bin": "out/rocm-release/bin/dflash_server"}
    gate = doc["gate"]
    assert isinstance(gate, dict) and "server_bin" not in gate  # one way to name the server, never both
    assert doc["merge"] == {"runners": ["gfx1151", "rtx4090"], "approvals": 1}
    text = (repo / "ds4ci.toml").read_text()
    assert "the name 'rtx4090' says no GPU kind: \"hip:0\" (AMD) or \"cuda:0\"" in text  # not silently hip:0
    assert "ds4ci gate --runner gfx1151" in init.stdout and "ds4ci gate --runner rtx4090" in init.stdout
    check = ds4ci("config", "check", cwd=repo, env=env)
    assert check.returncode == 2 and "ds4ci pin" in check.stderr  # only the TODO pins: the rest is valid
    assert "given twice" not in check.stderr


def test_init_names_the_build_command_or_a_prebuilt_binary_never_both(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    named = ds4ci("init", "--build-command", "make -j server", "--server-bin", "bin/server", "--no-workflows",
                  cwd=repo, env=env)
    assert named.returncode == 0, named.stderr
    assert _toml(repo)["build"] == {"command": "make -j server", "server_bin": "bin/server"}
    both = ds4ci("init", "--prebuilt", "--build-command", "make", "--no-workflows", "--force", cwd=repo, env=env)
    assert both.returncode == 2 and "keep one" in both.stderr
    (repo / "server").write_bytes(b"\x7fELF")
    prebuilt = ds4ci("init", "--prebuilt", "--server-bin", "server", "--no-workflows", "--force", cwd=repo, env=env)
    assert prebuilt.returncode == 0, prebuilt.stderr
    doc = _toml(repo)
    gate = doc["gate"]
    assert "build" not in doc and isinstance(gate, dict) and gate["server_bin"] == "server"
    assert len(str(gate["server_sha256"])) == 64
    assert "prebuilt: not built from the PR" in (repo / "ds4ci.toml").read_text()


def test_the_simulator_is_named_by_the_config_and_runs_sandboxed_with_nothing_preset(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    gate_table = _toml(repo)["gate"]
    assert isinstance(gate_table, dict) and gate_table["server"] == "simulator" and "server_bin" not in gate_table
    assert not (repo / "ds4ci-sim" / "server").exists()  # no wrapper whose first line names this venv
    gate = ds4ci("gate", "--runner", "local", "--widths", "2", cwd=repo, env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    results = json.loads(next((repo / "ds4ci-evidence" / "runs").glob("*/results.json")).read_text())
    assert results["identities"]["server_bin"]["path"].endswith("ds4ci/simulator/__main__.py")
    assert "--server simulator" in results["reproduce"]
    if results["containment"] == "sandbox":  # bubblewrap ran: ds4ci's Python was shown by the setting alone
        assert "DS4CI_SANDBOX" not in json.dumps(env)
    twice = ds4ci("gate", "--runner", "local", "--server-bin", sys.executable, cwd=repo, env=env)
    assert twice.returncode == 2 and "the server is given twice" in twice.stderr


def test_a_script_the_sandbox_cannot_start_is_said_so_not_read_as_a_kill(tmp_path: Path) -> None:
    """A wrapper whose first line names a Python the sandbox does not show: bwrap cannot exec it."""
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    venv_python = tmp_path / "elsewhere" / "bin" / "python3"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    (tmp_path / "server-bin").mkdir()
    wrapper = tmp_path / "server-bin" / "server"
    wrapper.write_text(f"#!{venv_python}\nfrom ds4ci.simulator.main import main\nmain()\n")
    wrapper.chmod(0o755)
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text().replace(
        'server = "simulator"', f'server_bin = "{wrapper}"\nserver_interpreters = ["{venv_python}"]'))
    gate = ds4ci("gate", "--runner", "local", "--widths", "2", "--json", cwd=repo, env=env)
    summary = json.loads(gate.stdout)
    if "sandbox: PR code runs under bubblewrap" not in gate.stderr:
        pytest.skip("bubblewrap does not run here: the server starts outside a sandbox")
    assert gate.returncode == 3 and summary["verdict"] == "error"
    results = json.loads(Path(summary["results_out"] or next(
        (repo / "ds4ci-evidence" / "failed").glob("*/results.json"))).read_text())
    reason = results["reasons"][0]
    assert "could not be started in the sandbox, it never ran" in reason and "bwrap: execvp" in reason, reason
    assert "SIGKILL" not in reason.splitlines()[0] and 'gate.server = "simulator"' in reason


def test_preflight_reads_the_default_config_like_every_command(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    pre = ds4ci("preflight", "--runner", "local", cwd=repo, env={**env, "DS4_MODEL_DIR": str(tmp_path)})  # no --config
    assert pre.returncode == 2, pre.stdout + pre.stderr
    assert "config: ./ds4ci.toml" in pre.stderr and "not pinned yet" in pre.stdout + pre.stderr
    assert "ready yes" not in pre.stdout


def test_config_check_reports_every_problem_at_once(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    text = config.read_text().replace("widths = [2, 3, 4]", 'widths = "2,3"\nmax_tokens = -3\nwidht = 2')
    config.write_text(text.replace("approvals = 1", 'approvals = "x"').replace('labels = ["self-hosted", "local"]',
                                                                               "labels = 7"))
    check = ds4ci("config", "check", cwd=repo, env=env)
    assert check.returncode == 2
    assert "5 problem(s)" in check.stderr, check.stderr
    for said in ("unknown key(s) widht; did you mean widths?", "gate.widths: expected a TOML array",
                 "gate.max_tokens: expected an integer >= 2", "merge.approvals: expected an integer",
                 "runners.local.labels: expected a non-empty list"):
        assert check.stderr.count(said) == 1, (said, check.stderr)


def test_pin_refreshes_only_the_pins_and_keeps_everything_else(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--runner", "local", "--no-workflows", cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text() + "# a note of the maintainer's\n")
    before = config.read_text()
    (repo / "ci" / "ds4").mkdir(parents=True)
    (repo / "ci" / "ds4" / "prompt-1.txt").write_text("a prompt\n")
    models = tmp_path / "models"
    models.mkdir()
    (models / "target.gguf").write_bytes(b"GGUF target")
    pin = ds4ci("pin", cwd=repo, env={**env, "DS4_MODEL_DIR": str(models)})
    assert pin.returncode == 0, pin.stderr
    assert "2 pin(s) rewritten, 1 file(s) not here" in pin.stdout
    assert "gate.draft_sha256: ${DS4_MODEL_DIR}/draft.gguf is not on this machine" in pin.stdout
    after = config.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(changed) == 2 and all("sha256" in b and "TODO" in a for a, b in changed)
    assert after.endswith("# a note of the maintainer's\n")
    again = ds4ci("pin", cwd=repo, env={**env, "DS4_MODEL_DIR": str(models)})
    assert again.returncode == 0 and "0 pin(s) rewritten" in again.stdout and config.read_text() == after


def test_pin_refuses_a_missing_config_and_writes_nothing(tmp_path: Path) -> None:
    proc = ds4ci("pin", cwd=tmp_path, env=clean_env(tmp_path))
    assert proc.returncode == 2 and "ds4ci.toml" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_gate_outside_a_git_checkout_says_so_at_once(tmp_path: Path) -> None:
    work = tmp_path / "plain"
    work.mkdir()
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--no-workflows", cwd=work, env=env).returncode == 0
    gate = ds4ci("gate", "--runner", "local", "--widths", "2", cwd=work, env=env)
    said = gate.stderr.index("is no git checkout with a commit: no head is recorded")
    assert said < gate.stderr.index("server pid")  # before any server starts


def test_the_runner_prerequisites_are_listed_where_an_adopter_reads() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "adopting.md").read_text(encoding="utf-8")
    for needed in ("python3-venv", "package index", "bubblewrap", "git` 2.38"):
        assert needed in text, needed
