"""What `ds4ci init` arranges in the adopter's repository and what it keeps there (issue 41, items 2 and 4):
the build folder it configures is ignored, a [build] whose output folder git tracks is refused, `ds4ci
upgrade` moves the workflows and never touches ds4ci.toml, and `init --force` never drops a key it did not write.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_adoption import clean_env, ds4ci, git_init

pytestmark = pytest.mark.e2e


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commit_all(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "files")


def test_init_ignores_the_build_folder_it_configures(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    (repo / "CMakeLists.txt").write_text("project(e C)\n")
    (repo / ".gitignore").write_text("*.o")  # the adopter's own, no final newline: kept and extended
    commit_all(repo)
    init = ds4ci("init", "--runner", "sm86", cwd=repo, env=clean_env(tmp_path))
    assert init.returncode == 0, init.stderr
    assert (repo / ".gitignore").read_text().splitlines()[0] == "*.o"
    assert "/build/" in (repo / ".gitignore").read_text().splitlines()
    (repo / "build" / "bin").mkdir(parents=True)  # what the [build] init wrote makes
    (repo / "build" / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/home/me/engine\n")
    git(repo, "add", "-A")
    staged = git(repo, "diff", "--cached", "--name-only").split()
    assert "ds4ci.toml" in staged and not [s for s in staged if s.startswith("build/")], staged
    again = ds4ci("init", "--runner", "sm86", "--force", cwd=repo, env=clean_env(tmp_path))
    assert again.returncode == 0, again.stderr
    assert (repo / ".gitignore").read_text().count("/build/") == 1  # once, however often init runs


def test_init_refuses_a_build_folder_git_tracks_and_writes_nothing(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    (repo / "CMakeLists.txt").write_text("project(e C)\n")
    (repo / "build").mkdir()
    (repo / "build" / "toolchain.cmake").write_text("set(X 1)\n")
    commit_all(repo)
    init = ds4ci("init", "--runner", "sm86", cwd=repo, env=clean_env(tmp_path))
    assert init.returncode == 2, init.stdout + init.stderr
    assert "build/toolchain.cmake" in init.stderr and "tracks" in init.stderr, init.stderr
    assert "Traceback" not in init.stderr
    assert sorted(p.name for p in repo.iterdir()) == [".git", "CMakeLists.txt", "build"]  # nothing written
    named = ds4ci("init", "--build-command", "make -C src", "--server-bin", "out/dflash_server", "--runner", "sm86",
                  cwd=repo, env=clean_env(tmp_path))
    assert named.returncode == 0, named.stderr  # a folder of its own is fine
    assert "/out/" in (repo / ".gitignore").read_text().splitlines()


HAND_EDITS = ('\n[runners.sm86]\nlabels = ["self-hosted", "sm86"]\ntarget_device = "cuda:0"\n'
              'public_key = "ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="\n')


def test_upgrade_moves_the_callers_two_pins_and_keeps_every_other_line(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--ds4ci-ref", "acme/ds4ci@v0.1.0", cwd=repo,
                 env=env).returncode == 0
    config = repo / "ds4ci.toml"
    config.write_text(config.read_text() + HAND_EDITS)
    before = config.read_bytes()
    gate_yml = repo / ".github" / "workflows" / "gate.yml"
    offered = "      bisect: {type: boolean, default: false}\n"  # an input the adopter added to the caller
    gate_yml.write_text(gate_yml.read_text().replace("      widths:", offered + "      widths:")
                        + "# our note: dispatch with bisect on a red pull request\n")
    edited = gate_yml.read_text()
    up = ds4ci("upgrade", "--ds4ci-ref", "acme/ds4ci@v0.2.0", cwd=repo, env=env)
    assert up.returncode == 0 and "calls acme/ds4ci@v0.2.0" in up.stdout and "every other line kept" in up.stdout, up
    assert config.read_bytes() == before
    text = gate_yml.read_text()
    assert "    uses: acme/ds4ci/.github/workflows/gate.yml@v0.2.0 # zizmor: ignore[unpinned-uses] " in text
    assert '    with: {ds4ci-ref: "acme/ds4ci@v0.2.0"}\n' in text and "v0.1.0" not in text
    assert text == edited.replace("v0.1.0", "v0.2.0")  # nothing else moved
    assert not (repo / ".github" / "workflows" / "report.yml").exists()


def test_upgrade_moves_the_workflows_and_keeps_ds4ci_toml_byte_for_byte(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", "--ds4ci-ref", "acme/ds4ci@v0.1.0", "--copy-workflows",
                 cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    edited = config.read_text().replace("approvals = 1", "approvals = 2") + HAND_EDITS
    config.write_text(edited)
    before = config.read_bytes()
    gate_yml = repo / ".github" / "workflows" / "gate.yml"
    gate_yml.write_text(gate_yml.read_text().replace("runs-on:", "runs-on:  ", 1))  # an old workflow's line
    up = ds4ci("upgrade", "--ds4ci-ref", "acme/ds4ci@v0.2.0", cwd=repo, env=env)
    assert up.returncode == 0, up.stderr
    assert config.read_bytes() == before
    for name in ("gate.yml", "report.yml"):
        text = (repo / ".github" / "workflows" / name).read_text()
        assert '  DS4CI_REF: "acme/ds4ci@v0.2.0"' in text.splitlines() and "acme/ds4ci@v0.1.0" not in text
    assert "'acme/ds4ci@v0.1.0' -> 'acme/ds4ci@v0.2.0'; 1 other line(s)" in up.stdout, up.stdout
    assert "not touched" in up.stdout
    check = ds4ci("config", "check", cwd=repo, env=env)
    assert check.returncode == 0 and "placeholder" not in check.stderr, check.stderr
    bad = ds4ci("upgrade", "--ds4ci-ref", "acme/ds4ci@main", cwd=repo, env=env)
    assert bad.returncode == 2 and "v0.1.0" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    empty = git_init(tmp_path / "empty")
    none = ds4ci("upgrade", "--ds4ci-ref", "acme/ds4ci@v0.2.0", cwd=empty, env=env)
    assert none.returncode == 2 and "ds4ci init" in none.stderr and not (empty / ".github").exists(), none.stderr


def test_init_force_refuses_to_discard_keys_it_did_not_write(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    env = clean_env(tmp_path)
    assert ds4ci("init", "--simulator", "--runner", "local", cwd=repo, env=env).returncode == 0
    config = repo / "ds4ci.toml"
    untouched = ds4ci("init", "--simulator", "--runner", "local", "--runner", "sm90", "--force", cwd=repo, env=env)
    assert untouched.returncode == 0, untouched.stderr  # every key in it was init's: replaced
    assert "[runners.sm90]" in config.read_text()
    edited = config.read_text().replace("approvals = 1", "approvals = 2") + HAND_EDITS
    config.write_text(edited)
    refused = ds4ci("init", "--simulator", "--runner", "local", "--force", cwd=repo, env=env)
    assert refused.returncode == 2, refused.stdout
    for key in ("merge.approvals = 2 (init writes 1)", "runners.sm86.public_key (init does not write it)",
                "runners.sm90.labels"):
        assert key in refused.stderr, refused.stderr
    assert "ds4ci upgrade" in refused.stderr and "Traceback" not in refused.stderr
    assert config.read_text() == edited
