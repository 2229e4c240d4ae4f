"""The comment sets each runner's result beside the base branch's, as GitHub's records say it (the fake GitHub API).

A publish on the base commit writes its status and check run (with the figures line); a pull request's publish
then reads them the way merge-check reads a green: the status links a run of the trusted gate on the base branch
whose verdict job concluded. A status that no such record ties to the gate compares nothing.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fakegithub import ACTIONS_LOGIN, MAIN_TIP, FakeGitHub, as_the_publishing_job
from paths import TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.evidence.results import load as load_results
from ds4ci.github.verified import Published

DATA = TESTS / "data" / "results"
HEAD = json.loads((DATA / "pass.json").read_text())["revisions"]["head"]["sha"]
BASE_RUN = 7001
BASE_URL = f"https://github.com/acme/engine/actions/runs/{BASE_RUN}"
PR_URL = "https://github.com/acme/engine/actions/runs/7"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    yield from as_the_publishing_job(monkeypatch, 42, ["a" * 40, HEAD])


def _on(name: str, sha: str) -> dict[str, Any]:
    doc = copy.deepcopy(load_results(DATA / f"{name}.json"))
    doc["revisions"]["head"]["sha"] = sha
    return doc


def _publish_base(fake: FakeGitHub, name: str, verdict: str) -> None:
    """The trusted gate dispatched on the base branch's tip: its run, and ds4ci publish of its results there."""
    fake.add_run(BASE_RUN, event="workflow_dispatch", title=f"ds4ci gate {MAIN_TIP}",
                 jobs={"gate gfx1151": verdict, "verdict gfx1151": verdict})
    request = PublishRequest(repo="acme/engine", sha=MAIN_TIP, api_url=fake.url, target_url=BASE_URL)
    assert publish_documents([Published(_on(name, MAIN_TIP), may_set_status=True)], request) == 0
    (run,) = [r for r in fake.check_runs() if r["sha"] == MAIN_TIP]
    assert "<!-- ds4ci:figures " in run["output"]["text"]  # what the pull request's publish reads back


def _comment(fake: FakeGitHub, name: str) -> str:
    request = PublishRequest(repo="acme/engine", pr=42, api_url=fake.url, target_url=PR_URL)
    assert publish_documents([Published(_on(name, HEAD), may_set_status=True)], request) == 0
    (comment,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN]
    return str(comment["body"])


def test_a_failure_the_base_did_not_have_is_new(fake: FakeGitHub) -> None:
    _publish_base(fake, "pass", "success")
    body = _comment(fake, "fail")
    assert "**blocked: gfx1151 fails parity at q=2, position 0 (new since the base)**" in body
    assert f"**Against the base** (`{MAIN_TIP[:7]}`): new since the base ({MAIN_TIP[:7]} passed)" in body
    # The base's numbers come from a check run, and any workflow's token writes those as github-actions: not shown.
    assert "| q=2 | 46/49 (94%) | — |" in body and "(the base: —)" in body


def test_a_workflow_s_check_run_on_the_base_cannot_put_numbers_in_the_comment(fake: FakeGitHub) -> None:
    """A check run a pull request's own workflow posts on the base (as github-actions) with a figures line of its
    choosing: the comment still shows the base's vouched result only, none of the numbers."""
    _publish_base(fake, "pass", "success")
    (honest,) = [r for r in fake.check_runs() if r["sha"] == MAIN_TIP]
    forged = re.sub(r'"offered":\d+', '"offered":4000', str(honest["output"]["text"]))
    forged = re.sub(r'"gate_s":[\d.]+', '"gate_s":9999999', forged)
    assert forged != honest["output"]["text"] and "4000" in forged
    fake.add_check_run(MAIN_TIP, "ds4ci/gfx1151", text=forged)
    body = _comment(fake, "fail")
    assert f"new since the base ({MAIN_TIP[:7]} passed)" in body
    assert "4000" not in body and "4,000" not in body and "9999999" not in body and "2777 h" not in body


def test_a_failure_the_base_had_is_already_failing_there(fake: FakeGitHub) -> None:
    _publish_base(fake, "fail", "failure")
    body = _comment(fake, "fail")
    assert "**blocked: gfx1151 fails parity at q=2, position 0 (already failing on the base)**" in body
    assert f"already failing on the base ({MAIN_TIP[:7]})" in body
    assert "at the same position" not in body  # a first difference of the base's is a figure: not shown (see above)


def test_a_pass_where_the_base_failed_is_a_fix(fake: FakeGitHub) -> None:
    _publish_base(fake, "fail", "failure")
    body = _comment(fake, "pass")
    assert "**1 of 1 runners pass on 1a95462: may merge**" in body
    assert f"fixed: the base ({MAIN_TIP[:7]}) fails" in body


def test_a_base_status_no_record_ties_to_the_gate_compares_nothing(fake: FakeGitHub) -> None:
    """Anyone with write access can post a failure on the base: it must not make a new failure look old."""
    fake.add_status(MAIN_TIP, "ds4ci/gfx1151", "failure", "fail: made up", target_url=None)
    body = _comment(fake, "fail")
    assert "**blocked: gfx1151 fails parity at q=2, position 0**" in body
    assert "already failing" not in body and "no result there that GitHub" in body
