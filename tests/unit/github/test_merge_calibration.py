"""merge.calibration_max_age_days: each gate runner's own check run must cite a calibration that recent (off at 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.github import merge, mergeconfig
from ds4ci.github.merge import CheckRun, MergeFacts, PullFacts, Requirements, Status

HEAD = "1" * 40
CITED = ("**Proof strength**: planted faults caught: 13 of 13 at every width where they can act; calibrated {day} on "
         "engine 41ee7d0<br>**Runner**: NVIDIA H200")
NEVER = "**Proof strength**: runner h200 was never calibrated with these tiny models"


def facts(summary: str, app: str = "github-actions") -> MergeFacts:
    return MergeFacts(
        pull=PullFacts(7, HEAD, "open", merged=False, draft=False, mergeable=True, mergeable_state="clean"),
        statuses=(Status("ds4ci/h200", "success"),),
        check_runs=(CheckRun("ds4ci/h200", "completed", "success", HEAD, app=app, id=1, summary=summary),),
        today="2026-12-10",
    )


def conditions(found: MergeFacts, days: int) -> dict[str, tuple[bool, str]]:
    need = Requirements(runners=("h200",), approvals=0, calibration_max_age_days=days)
    return {c.name: (c.ok, c.detail) for c in merge.evaluate(found, need).conditions}


def test_off_by_default_and_no_condition_is_added() -> None:
    assert "calibration of h200" not in conditions(facts(NEVER), 0)
    assert Requirements(runners=("h200",)).calibration_max_age_days == 0


@pytest.mark.parametrize(("summary", "ok", "words"), [
    (CITED.format(day="2026-12-04"), True, "calibrated 2026-12-04 (6 days ago, at most 30)"),
    (CITED.format(day="2026-10-01"), False, "calibrated 2026-10-01, 70 days ago: older than the 30 days"),
    (NEVER, False, "cites no calibration (the runner was never calibrated"),
])
def test_the_cited_calibration_must_be_recent_enough(summary: str, ok: bool, words: str) -> None:
    found = conditions(facts(summary), 30)["calibration of h200"]
    assert found[0] is ok and words in found[1]


def test_a_check_run_of_another_app_cites_nothing_that_counts() -> None:
    found = conditions(facts(CITED.format(day="2026-12-09"), app="someone-else"), 30)["calibration of h200"]
    assert found[0] is False


def test_the_option_is_read_from_the_merge_table(tmp_path: Path) -> None:
    config = tmp_path / "ds4ci.toml"
    config.write_text('[merge]\nrunners = ["h200"]\ncalibration_max_age_days = 14\n', encoding="utf-8")
    assert mergeconfig.requirements(config, None, None, None).calibration_max_age_days == 14
    config.write_text('[merge]\nrunners = ["h200"]\ncalibration_max_age_days = -1\n', encoding="utf-8")
    with pytest.raises(UsageError, match="calibration_max_age_days"):
        mergeconfig.requirements(config, None, None, None)
