"""The GitHub-side checklist of an adoption is written once (ds4ci/commands/checklist.md): docs/adopting.md
holds it word for word, top to bottom, and `ds4ci init` prints it, so a maintainer who reads either gets the
same list: the variables, the environment and its reviewers, the runners and the service per runner, branch
protection or a ruleset, and the merge queue."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import ROOT
from test_adoption import clean_env, ds4ci, git_init

from ds4ci.commands import checklist

pytestmark = pytest.mark.e2e
START = "<!-- checklist: ds4ci/commands/checklist.md (ds4ci init prints it; tests compare the two) -->\n"
END = "<!-- end of checklist -->\n"


def test_adopting_md_holds_the_checklist_word_for_word_once() -> None:
    doc = (ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    assert doc.count(START) == 1 and doc.count(END) == 1
    held = doc.split(START, 1)[1].split(END, 1)[0]
    assert held == checklist.text()
    for item in ("DS4_MODEL_DIR", "DS4CI_SERVICE_SOCKET", "ds4ci-fork-review", "required reviewers",
                 "ds4ci service install", "public_key", "ruleset", "`ds4ci/<runner>`", "`[merge] runners`",
                 "merge queue", "merge_group", "release branch", "default branch"):
        assert item in held, item
    # It comes before the details of each item: a maintainer reading top to bottom meets the list first.
    assert doc.index(START) < doc.index("Each item in detail:") < doc.index("Repository variable `DS4_MODEL_DIR`")


@pytest.mark.parametrize("args", [["--runner", "sm86"], ["--runner", "sm86", "--copy-workflows"]],
                         ids=["caller", "copies"])
def test_init_prints_the_checklist(tmp_path: Path, args: list[str]) -> None:
    repo = git_init(tmp_path / "engine")
    init = ds4ci("init", *args, cwd=repo, env=clean_env(tmp_path))
    assert init.returncode == 0, init.stderr
    assert init.stdout.endswith(checklist.text()), init.stdout


def test_init_without_workflows_prints_no_workflow_checklist(tmp_path: Path) -> None:
    repo = git_init(tmp_path / "engine")
    init = ds4ci("init", "--runner", "sm86", "--no-workflows", cwd=repo, env=clean_env(tmp_path))
    assert init.returncode == 0, init.stderr
    assert checklist.text() not in init.stdout and "wrote:" in init.stdout
