"""revisions.py and `ds4ci revisions` on real git repositories made in temporary directories."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import ds4ci
from ds4ci.errors import EXIT_USAGE, UsageError
from ds4ci.evidence.results import schema
from ds4ci.runner.revisions import collect

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], env=GIT_ENV, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: init; feature (checked out): changes a.txt; main then changes b.txt (clean merge)."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "initial commit", {"a.txt": "a\n", "b.txt": "b\n", "dir/c file.txt": "c\n"})
    git(path, "checkout", "-q", "-b", "feature")
    commit(path, "feature: touch a", {"a.txt": "a feature\n"})
    git(path, "checkout", "-q", "main")
    commit(path, "main: touch b", {"b.txt": "b main\n"})
    git(path, "checkout", "-q", "feature")
    return path


def validate(record: object) -> None:
    revisions_schema = schema()["properties"]["revisions"]
    jsonschema.Draft202012Validator({"$defs": schema()["$defs"], **revisions_schema}).validate(record)


def test_detached_head_keeps_the_ref_given(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach", "feature")
    assert collect(repo, base_ref="main", upstream_ref=None)["head"]["ref"] == "HEAD"


def test_clean_merge(repo: Path) -> None:
    record = collect(repo, base_ref="main", upstream_ref=None)
    validate(record)
    initial = git(repo, "rev-parse", "main~1")
    # HEAD is on the branch "feature": the record names the branch, which a reader recognises.
    assert record["head"] == {"ref": "feature", "sha": git(repo, "rev-parse", "feature"), "subject": "feature: touch a"}
    assert record["base"] == {"ref": "main", "sha": git(repo, "rev-parse", "main"), "subject": "main: touch b"}
    assert record["upstream"] is None
    assert record["merge_base"] == initial
    merge = record["synthetic_merge"]
    assert merge["status"] == "clean" and merge["conflicts"] == []
    # The tree really is the merge: both sides' changes, and nothing in the work tree changed.
    assert git(repo, "show", f"{merge['tree']}:a.txt") == "a feature"
    assert git(repo, "show", f"{merge['tree']}:b.txt") == "b main"
    assert git(repo, "status", "--porcelain") == ""
    assert record["last_validated_predecessor"] is None


def test_conflict_lists_every_conflicting_path(repo: Path) -> None:
    git(repo, "checkout", "-q", "main")
    commit(repo, "main: conflicting edits", {"a.txt": "a main\n", "dir/c file.txt": "c main\n"})
    git(repo, "checkout", "-q", "feature")
    commit(repo, "feature: more", {"dir/c file.txt": "c feature\n"})
    record = collect(repo, head_ref="feature", base_ref="main", upstream_ref=None)
    validate(record)
    assert record["synthetic_merge"] == {"status": "conflict", "tree": None, "conflicts": ["a.txt", "dir/c file.txt"]}
    assert record["head"]["ref"] == "feature"


def test_upstream_is_used_when_there_is_no_base(repo: Path) -> None:
    git(repo, "branch", "upstream-main", "main")
    record = collect(repo, base_ref=None, upstream_ref="upstream-main")
    validate(record)
    assert record["base"] is None
    assert record["upstream"]["sha"] == git(repo, "rev-parse", "main")
    assert record["merge_base"] == git(repo, "rev-parse", "main~1")
    assert record["synthetic_merge"]["status"] == "clean"


def test_base_wins_over_upstream(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "up", "main")
    commit(repo, "upstream: conflicting a", {"a.txt": "a upstream\n"})
    git(repo, "checkout", "-q", "feature")
    record = collect(repo, base_ref="main", upstream_ref="up")
    validate(record)
    assert record["upstream"]["subject"] == "upstream: conflicting a"
    assert record["synthetic_merge"]["status"] == "clean"  # head+base, not head+upstream


def test_only_head(repo: Path) -> None:
    record = collect(repo, base_ref=None, upstream_ref=None)
    validate(record)
    assert record["merge_base"] is None
    assert record["synthetic_merge"] == {"status": "not_computed", "tree": None, "conflicts": []}


def test_unrelated_histories_are_not_computed(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "other")
    git(repo, "rm", "-r", "-q", "--cached", ".")
    for child in ("a.txt", "b.txt", "dir"):
        shutil.rmtree(repo / child) if (repo / child).is_dir() else (repo / child).unlink()
    commit(repo, "unrelated root", {"z.txt": "z\n"})
    record = collect(repo, head_ref="feature", base_ref="other", upstream_ref=None)
    validate(record)
    assert record["merge_base"] is None
    assert record["synthetic_merge"]["status"] == "not_computed"


def test_sha_and_tag_refs(repo: Path) -> None:
    git(repo, "tag", "-a", "v1", "-m", "tag message", "main")
    sha = git(repo, "rev-parse", "main")
    record = collect(repo, head_ref=sha[:12], base_ref="v1", upstream_ref=None)
    assert record["head"]["sha"] == sha and record["head"]["ref"] == sha[:12]
    assert record["base"]["sha"] == sha  # an annotated tag is peeled to its commit


def test_missing_ref_is_usage_error(repo: Path) -> None:
    with pytest.raises(UsageError, match="base ref 'origin/nope' does not name a commit"):
        collect(repo, base_ref="origin/nope", upstream_ref=None)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    with pytest.raises(UsageError, match="does not name a commit"):
        collect(repo, head_ref=tree, base_ref=None, upstream_ref=None)


@pytest.mark.parametrize("ref", ["--output=OUT", "-h", "", "main\nHEAD"])
def test_option_like_or_garbled_ref_is_refused(repo: Path, tmp_path: Path, ref: str) -> None:
    ref = ref.replace("OUT", str(tmp_path / "written"))
    with pytest.raises(UsageError):
        collect(repo, base_ref=None, upstream_ref=ref)
    assert not (tmp_path / "written").exists()


def test_not_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # never find a repo above tmp_path
    with pytest.raises(UsageError, match="not a usable git repository"):
        collect(plain, base_ref=None, upstream_ref=None)
    with pytest.raises(UsageError, match="does not exist"):
        collect(tmp_path / "absent", base_ref=None, upstream_ref=None)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    root = str(Path(ds4ci.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = "import sys; from ds4ci.cli import main; sys.argv[0] = 'ds4ci'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60)


def test_cli_prints_the_record(repo: Path) -> None:
    proc = _cli("revisions", "--repo-dir", str(repo), "--base-ref", "main")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    validate(record)
    assert record["synthetic_merge"]["status"] == "clean"
    assert record["head"]["sha"] == git(repo, "rev-parse", "HEAD")


def test_cli_bad_ref_exits_2(repo: Path) -> None:
    proc = _cli("revisions", "--repo-dir", str(repo), "--base-ref", "nope")
    assert proc.returncode == EXIT_USAGE
    assert "'nope' does not name a commit" in proc.stderr
    assert proc.stdout == ""


def _program(tmp_path: Path, marker: Path) -> Path:
    """A program that, if git ever ran it, appends to ``marker`` (and passes its input through, like a filter)."""
    path = tmp_path / "planted.sh"
    path.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\ncat\n')
    path.chmod(0o755)
    return path


def test_git_runs_no_program_the_repository_or_the_environment_names(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    program = _program(tmp_path, marker)
    for key in ("core.fsmonitor", "filter.evil.clean", "filter.evil.process", "core.pager", "gpg.program"):
        git(repo, "config", key, str(program))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "config", "core.hooksPath", str(tmp_path))
    (tmp_path / "post-index-change").write_bytes(program.read_bytes())
    (tmp_path / "post-index-change").chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=evil\n")
    os.utime(repo / "a.txt", (1, 1))  # stat-dirty: a status re-reads it, through the clean filter if one is set
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    commit(other, "another repository", {"x.txt": "x\n"})
    # What the job's environment could carry: another repository, config of its own, an external diff.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(program))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(program))
    record = collect(repo, base_ref="main", upstream_ref=None)
    validate(record)
    assert not marker.exists(), marker.read_text()
    monkeypatch.delenv("GIT_DIR")
    assert record["head"]["sha"] == git(repo, "rev-parse", "feature")  # this repository, not GIT_DIR's
    assert record["dirty"] is False  # the touched file's content is unchanged
    assert record["synthetic_merge"]["status"] == "clean"


@pytest.mark.parametrize("key", ["merge.evil.driver", "include.path", "includeIf.gitdir:/.path"])
def test_a_merge_driver_or_an_include_in_the_repository_config_is_refused(repo: Path, tmp_path: Path, key: str) -> None:
    marker = tmp_path / "ran"
    program = _program(tmp_path, marker)
    git(repo, "checkout", "-q", "main")
    commit(repo, "main: conflicting a", {"a.txt": "a main\n"})
    git(repo, "checkout", "-q", "feature")
    (repo / ".gitattributes").write_text("* merge=evil\n")
    git(repo, "config", "merge.evil.driver", f"{program} %A %B; exit 0")  # git merge-tree would run it
    if key != "merge.evil.driver":
        git(repo, "config", "--unset", "merge.evil.driver")
        included = tmp_path / "included"
        included.write_text(f'[merge "evil"]\n\tdriver = {program} %A %B; exit 0\n')
        git(repo, "config", key, str(included))
    listed = key.replace("includeIf", "includeif")  # as git lists it: section and key in lower case
    with pytest.raises(UsageError, match=rf"sets {re.escape(listed)}: git would run"):
        collect(repo, base_ref="main", upstream_ref=None)
    assert not marker.exists(), marker.read_text()
