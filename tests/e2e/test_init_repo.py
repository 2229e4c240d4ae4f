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
