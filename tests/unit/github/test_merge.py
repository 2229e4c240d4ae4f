"""The merge rules (ds4ci.github.merge.evaluate): every condition holds and fails, on the exact head."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.github import merge, mergeconfig
from ds4ci.github.merge import CheckRun, MergeFacts, PullFacts, Requirements, Review, ReviewThread, Status

HEAD = "1" * 40
OLD = "0" * 40
NEED = Requirements(runners=("sm86", "gfx1151"), checks=("build", "ai-review"), approvals=1)
# What the gatherer (ds4ci.github.vouch) found in GitHub's records: each runner's trusted gate run vouches.
VOUCHED = {r: merge.Vouch(True, f"run 9 (.github/workflows/gate.yml, pull_request_target on main, job 'verdict {r}' "
                                "success in attempt 1)") for r in NEED.runners}


def ready_facts() -> MergeFacts:
    return MergeFacts(
        pull=PullFacts(42, HEAD, "open", merged=False, draft=False, mergeable=True, mergeable_state="clean"),
        statuses=(Status("ds4ci/sm86", "success"), Status("ds4ci/gfx1151", "success"), Status("ai-review", "success")),
        check_runs=(CheckRun("build", "completed", "success", HEAD),),
        reviews=(Review("alice", "APPROVED", HEAD, "MEMBER"),),
        threads=(ReviewThread("src/a.py", 3, resolved=True),),
        vouches=VOUCHED,
    )


def unmet(facts: MergeFacts, need: Requirements = NEED) -> dict[str, str]:
    return {c.name: c.detail for c in merge.evaluate(facts, need).unmet}


def test_all_conditions_hold() -> None:
    report = merge.evaluate(ready_facts(), NEED)
    assert report.ready
    assert [c.name for c in report.conditions] == [
        "open", "not draft", "mergeable", "gate ds4ci/sm86", "gate ds4ci/gfx1151", "check build",
        "check ai-review", "approvals", "no changes requested", "review threads",
    ]
    assert report.to_json()["ready"] is True
    assert merge.render_text(report).startswith(f"#42 at {HEAD}: ready to merge")


# ----- the pull request itself -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "name", "words"),
    [
        ({"state": "closed"}, "open", "closed, not open"),
        ({"merged": True, "state": "closed"}, "open", "already merged"),
        ({"draft": True}, "not draft", "a draft"),
        ({"mergeable": False, "mergeable_state": "dirty"}, "mergeable", "not mergeable (mergeable_state dirty)"),
        ({"mergeable": None, "mergeable_reads": 5}, "mergeable", "mergeability not yet computed"),
    ],
)
def test_pull_request_state_blocks(change: dict[str, object], name: str, words: str) -> None:
    facts = ready_facts()
    facts = replace(facts, pull=replace(facts.pull, **change))  # type: ignore[arg-type]
    found = unmet(facts)
    assert list(found) == [name]
    assert words in found[name]


# ----- gates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "words"), [("pending", "pending"), ("failure", "failure"), ("error", "error")])
def test_gate_not_success_on_head_blocks(state: str, words: str) -> None:
    facts = replace(ready_facts(), statuses=(Status("ds4ci/sm86", state, "2 of 3 widths"), Status("ds4ci/gfx1151", "success"),
                                               Status("ai-review", "success")))
    found = unmet(facts)
    assert list(found) == ["gate ds4ci/sm86"]
    assert found["gate ds4ci/sm86"].startswith(f"{words} (2 of 3 widths) on the current head")


def test_gate_green_only_on_a_predecessor_blocks_and_names_that_head() -> None:
    facts = replace(ready_facts(), statuses=(Status("ds4ci/gfx1151", "success"), Status("ai-review", "success")),
                    gate_green_on={"sm86": OLD})
    found = unmet(facts)
    assert list(found) == ["gate ds4ci/sm86"]
    assert "not set on the current head 111111111111" in found["gate ds4ci/sm86"]
    assert f"success only on the older head {OLD}" in found["gate ds4ci/sm86"]


def test_gate_never_green_says_so() -> None:
    facts = replace(ready_facts(), statuses=(Status("ds4ci/gfx1151", "success"), Status("ai-review", "success")))
    assert "no success on any commit of this PR" in unmet(facts)["gate ds4ci/sm86"]


# ----- named checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "words"),
    [
        (CheckRun("build", "in_progress", None, HEAD), "check run pending (in_progress)"),
        (CheckRun("build", "queued", None, HEAD), "check run pending (queued)"),
        (CheckRun("build", "completed", "failure", HEAD), "check run concluded failure"),
        (CheckRun("build", "completed", "neutral", HEAD), "check run concluded neutral"),
        (CheckRun("build", "completed", "cancelled", HEAD), "check run concluded cancelled"),
    ],
)
def test_check_run_not_successful_blocks(run: CheckRun, words: str) -> None:
    found = unmet(replace(ready_facts(), check_runs=(run,)))
    assert list(found) == ["check build"]
    assert found["check build"].startswith(words)


def test_check_missing_blocks_and_green_on_an_older_head_does_not_count() -> None:
    found = unmet(replace(ready_facts(), check_runs=(CheckRun("build", "completed", "success", OLD),)))
    assert list(found) == ["check build"]
    assert found["check build"].startswith("missing: no check run or commit status named 'build'")


@pytest.mark.parametrize(("state", "words"), [("pending", "status pending"), ("failure", "status failed (failure)"),
                                               ("error", "status failed (error)")])
def test_check_as_a_status_context_must_be_success(state: str, words: str) -> None:
    facts = replace(ready_facts(), statuses=(Status("ds4ci/sm86", "success"), Status("ds4ci/gfx1151", "success"),
                                               Status("ai-review", state, "reviewing")))
    found = unmet(facts)
    assert list(found) == ["check ai-review"]
    assert found["check ai-review"] == f"{words}: reviewing on the head 111111111111"


def test_a_check_matching_both_a_run_and_a_status_needs_both_green() -> None:
    facts = replace(ready_facts(), check_runs=(*ready_facts().check_runs, CheckRun("ai-review", "completed", "success", HEAD)))
    assert merge.evaluate(facts, NEED).ready
    facts = replace(facts, check_runs=(*ready_facts().check_runs, CheckRun("ai-review", "completed", "failure", HEAD)))
    assert list(unmet(facts)) == ["check ai-review"]


# ----- reviews ---------------------------------------------------------------------------------


def test_stale_approval_does_not_count_and_says_so() -> None:
    found = unmet(replace(ready_facts(), reviews=(Review("alice", "APPROVED", OLD, "MEMBER"),)))
    assert list(found) == ["approvals"]
    assert found["approvals"].startswith("0 of 1 required approval(s) on the head 111111111111")
    assert "stale, not counted: alice approved the older commit 000000000000" in found["approvals"]


def test_approvals_count_distinct_current_reviewers() -> None:
    need = replace(NEED, approvals=2)
    one = replace(ready_facts(), reviews=(Review("alice", "APPROVED", HEAD, "MEMBER"),
                                           Review("alice", "APPROVED", HEAD, "MEMBER")))
    assert list(unmet(one, need)) == ["approvals"]
    two = replace(one, reviews=(*one.reviews, Review("bob", "APPROVED", HEAD, "OWNER")))
    assert merge.evaluate(two, need).ready


def test_approval_by_a_non_member_is_not_counted() -> None:
    found = unmet(replace(ready_facts(), reviews=(Review("mallory", "APPROVED", HEAD, "CONTRIBUTOR"),)))
    assert "not counted: mallory (contributor: not a member or collaborator)" in found["approvals"]


def test_zero_approvals_required_is_met_without_reviews() -> None:
    assert merge.evaluate(replace(ready_facts(), reviews=()), replace(NEED, approvals=0)).ready


@pytest.mark.parametrize(
    ("states", "blocked"),
    [
        (["APPROVED", "CHANGES_REQUESTED"], True),
        (["CHANGES_REQUESTED", "APPROVED"], False),
        (["CHANGES_REQUESTED", "COMMENTED"], True),  # a comment does not withdraw a change request
        (["CHANGES_REQUESTED", "DISMISSED"], False),
        (["CHANGES_REQUESTED", "PENDING"], True),
    ],
)
def test_latest_review_per_reviewer_decides_changes_requested(states: list[str], blocked: bool) -> None:
    reviews = (Review("alice", "APPROVED", HEAD, "MEMBER"), *(Review("bob", s, HEAD, "MEMBER") for s in states))
    found = unmet(replace(ready_facts(), reviews=reviews))
    assert ("no changes requested" in found) is blocked
    if blocked:
        assert found["no changes requested"] == "changes requested by bob (on 111111111111)"


def test_a_comment_after_an_approval_keeps_the_approval() -> None:
    reviews = (Review("alice", "APPROVED", HEAD, "MEMBER"), Review("alice", "COMMENTED", HEAD, "MEMBER"))
    assert merge.evaluate(replace(ready_facts(), reviews=reviews), NEED).ready


# ----- review threads --------------------------------------------------------------------------


def test_each_unresolved_thread_is_named_by_file_and_line() -> None:
    threads = (ReviewThread("src/a.py", 3, resolved=True), ReviewThread("src/b.py", 12),
               ReviewThread("docs/x.md", None, original_line=7, outdated=True), ReviewThread("LICENSE", None))
    found = unmet(replace(ready_facts(), threads=threads))
    assert found == {
        "review thread src/b.py:12": "unresolved review thread",
        "review thread docs/x.md:7": "unresolved review thread (outdated)",
        "review thread LICENSE": "unresolved review thread",
    }


def test_text_has_one_line_per_unmet_condition() -> None:
    facts = replace(ready_facts(), threads=(ReviewThread("src/b.py", 12),), reviews=())
    text = merge.render_text(merge.evaluate(facts, NEED))
    lines = text.splitlines()
    assert lines[0] == f"#42 at {HEAD}: not ready (2 of 10 conditions unmet)"
    assert lines[1:] == ["  - approvals: 0 of 1 required approval(s) on the head 111111111111",
                         "  - review thread src/b.py:12: unresolved review thread",
                         # each green gate, with the record that vouched for it
                         f"  + gate ds4ci/sm86: success on the head 111111111111, vouched for by {VOUCHED['sm86'].detail}",
                         f"  + gate ds4ci/gfx1151: success on the head 111111111111, vouched for by "
                         f"{VOUCHED['gfx1151'].detail}"]


# ----- the checklist for a PR comment ----------------------------------------------------------


def test_checklist_markdown_is_a_task_list_and_escaped() -> None:
    need = replace(NEED, checks=("build", "ai-review", "@team|x"))
    lines = merge.checklist_markdown(merge.evaluate(ready_facts(), need))
    assert lines[0].startswith("**Review and merge status** on `111111111111`: not ready: 1 condition(s) unmet")
    assert any(x.startswith("- [x] gate ds4ci/sm86: success on the head 111111111111, vouched for by run 9") for x in lines)
    (bad,) = [line for line in lines if line.startswith("- [ ]")]
    assert "|" not in bad and "@team" not in bad  # a check name cannot break a table or ping anyone
    assert sum(line.startswith("- [") for line in lines) == 11


# ----- settings --------------------------------------------------------------------------------


def test_requirements_from_merge_table_and_cli_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[merge]\nrunners = ["gfx1151", "sm86"]\nchecks = ["ci"]\napprovals = 2\n', encoding="utf-8")
    assert mergeconfig.requirements(cfg, None, None, None) == Requirements(("gfx1151", "sm86"), ("ci",), 2)
    assert mergeconfig.requirements(cfg, ["sm86"], ["lint"], 0) == Requirements(("sm86",), ("lint",), 0)


@pytest.mark.parametrize(
    ("toml", "args", "message"),
    [
        ('[merge]\nrunner = ["a"]\n', (None, None, None), "unknown key(s) runner"),
        ('[merge]\nrunners = "sm86"\n', (None, None, None), "merge.runners: expected a list of names"),
        ('[merge]\nrunners = ["sm 86"]\n', (None, None, None), "merge.runners: expected letters"),
        ('[merge]\nrunners = ["a", "a"]\n', (None, None, None), "a listed twice"),
        ('[merge]\nrunners = ["a"]\napprovals = -1\n', (None, None, None), "merge.approvals: expected an integer >= 0"),
        ('[merge]\nrunners = ["a"]\napprovals = true\n', (None, None, None), "merge.approvals"),
        ("merge = 3\n", (None, None, None), "[merge] must be a table"),
        ("", (None, None, None), "name at least one gate runner"),
        ("", (["a"], [""], None), "--check: expected a non-empty name"),
    ],
)
def test_bad_settings_are_usage_errors(tmp_path: Path, toml: str, args: tuple[object, object, object], message: str) -> None:
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text(toml, encoding="utf-8")
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        mergeconfig.requirements(cfg, *args)  # type: ignore[arg-type]


def test_gate_config_loader_accepts_a_merge_table(tmp_path: Path) -> None:
    from ds4ci.options import config as config_mod

    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[runner]\nname = "x"\nrole = "negative-control"\n[merge]\nrunners = ["x"]\n[preflight]\nbusy_wait = 5\n',
                   encoding="utf-8")
    assert config_mod.load(cfg, {}).runner == "x"


def test_a_green_no_record_vouched_for_is_not_counted_and_says_why() -> None:
    why = "run 9's job 'verdict sm86' concluded failure (attempt 2)"
    facts = replace(ready_facts(), vouches={**VOUCHED, "sm86": merge.Vouch(False, why)})
    assert unmet(facts) == {"gate ds4ci/sm86": f"success on the current head {HEAD[:12]} not counted: {why}"}
    assert unmet(replace(ready_facts(), vouches={})) == {
        f"gate ds4ci/{r}": f"success on the current head {HEAD[:12]} not counted: no record of GitHub's was read for it"
        for r in NEED.runners}
