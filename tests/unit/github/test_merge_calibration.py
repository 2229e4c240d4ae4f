"""merge.calibration_max_age_days: the run that vouched for each gate runner's green must record a calibration
that recent (off at 0). The record is an artifact name of that run (``ds4ci.github.calrecord``); no text counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4ci.errors import UsageError
from ds4ci.github import calrecord, merge, mergeconfig
from ds4ci.github.merge import CheckRun, MergeFacts, PullFacts, Requirements, Status, Vouch

HEAD = "1" * 40
CITED = ("**Proof strength**: planted faults caught: 13 of 13 at every width where they can act; calibrated {day} on "
         "engine 41ee7d0<br>**Runner**: NVIDIA H200")
VOUCHED = Vouch(True, "run 9 (.github/workflows/gate.yml, ...)", run=9)


def facts(artifacts: tuple[str, ...] = (), vouch: Vouch = VOUCHED, summary: str = "") -> MergeFacts:
    return MergeFacts(
        pull=PullFacts(7, HEAD, "open", merged=False, draft=False, mergeable=True, mergeable_state="clean"),
        statuses=(Status("ds4ci/h200", "success"),),
        check_runs=(CheckRun("ds4ci/h200", "completed", "success", HEAD, id=1, summary=summary),),
        today="2026-12-10", vouches={"h200": vouch}, run_artifacts={9: artifacts},
    )


def conditions(found: MergeFacts, days: int) -> dict[str, tuple[bool, str]]:
    need = Requirements(runners=("h200",), approvals=0, calibration_max_age_days=days)
    return {c.name: (c.ok, c.detail) for c in merge.evaluate(found, need).conditions}


def test_off_by_default_and_no_condition_is_added() -> None:
    assert "calibration of h200" not in conditions(facts(), 0)
    assert Requirements(runners=("h200",)).calibration_max_age_days == 0


@pytest.mark.parametrize(("artifacts", "ok", "words"), [
    (("ds4ci-calibrated--h200=2026-12-04",), True, "calibrated 2026-12-04 (run 9's record; 6 days ago, at most 30)"),
    (("ds4ci-calibrated--a-b=2026-12-09--h200=2026-10-01",), False, "70 days ago: older than the 30 days"),
    ((), False, "run 9, which vouched for the gate, records no calibration of runner h200"),
    (("ds4ci-calibrated--h200=2026-12-04", "ds4ci-calibrated--h200=2026-12-05"), False, "2 calibration days"),
    (("ds4ci-calibrated--h2000=2026-12-09", "ds4ci-calibrated--h200=2026-12-09x", "ds4ci-comment-5"), False,
     "records no calibration"),
])
def test_the_recorded_calibration_must_be_recent_enough(artifacts: tuple[str, ...], ok: bool, words: str) -> None:
    found = conditions(facts(artifacts), 30)["calibration of h200"]
    assert found[0] is ok and words in found[1], found


def test_no_check_run_text_counts_however_it_reads() -> None:
    found = conditions(facts(summary=CITED.format(day="2026-12-09")), 30)["calibration of h200"]
    assert found[0] is False and "records no calibration" in found[1]


def test_without_a_vouching_run_no_calibration_is_read() -> None:
    unvouched = conditions(facts(("ds4ci-calibrated--h200=2026-12-09",), Vouch(False, "no run")), 30)
    assert unvouched["calibration of h200"][0] is False
    by_app = conditions(facts(("ds4ci-calibrated--h200=2026-12-09",), Vouch(True, "check run 3 of App x")), 30)
    assert by_app["calibration of h200"][0] is False and 'merge.vouch = "workflow"' in by_app["calibration of h200"][1]


def test_the_record_name_reads_back_one_way() -> None:
    days = {"h200": "2026-12-04", "a--b.c_d": "2026-01-31"}
    name = calrecord.artifact_name(days)
    assert name == "ds4ci-calibrated--a--b.c_d=2026-01-31--h200=2026-12-04"
    parsed = calrecord.parse(name)
    assert parsed is not None and {k: v.isoformat() for k, v in parsed.items()} == days
    assert calrecord.artifact_name({}) is None
    for bad in ("ds4ci-calibrated", "ds4ci-calibrated--h200=2026-13-01", "ds4ci-calibrated--h200=2026-12-04-",
                "ds4ci-calibrated--=2026-12-04", "ds4ci-calibrated--h200=2026-12-04--h200=2026-12-04"):
        assert calrecord.parse(bad) is None, bad


def test_publish_records_only_a_cited_calibration_of_a_gate_runner() -> None:
    def doc(name: str, state: str, role: str = "gate") -> dict[str, object]:
        return {"runner": {"name": name, "role": role},
                "calibration": {"state": state, "finished": "2026-12-04T10:00:00Z"}}
    docs = [doc("a", "cited"), doc("b", "never"), doc("c", "failed"), doc("d", "cited", "negative-control"),
            {"runner": {"name": "e"}}]
    found = [(d["runner"]["name"], d["runner"].get("role", "gate"), d.get("calibration")) for d in docs]
    assert calrecord.cited_days(found) == {"a": "2026-12-04"}


def test_the_option_is_read_from_the_merge_table(tmp_path: Path) -> None:
    config = tmp_path / "ds4ci.toml"
    config.write_text('[merge]\nrunners = ["h200"]\ncalibration_max_age_days = 14\n', encoding="utf-8")
    assert mergeconfig.requirements(config, None, None, None).calibration_max_age_days == 14
    config.write_text('[merge]\nrunners = ["h200"]\ncalibration_max_age_days = -1\n', encoding="utf-8")
    with pytest.raises(UsageError, match="calibration_max_age_days"):
        mergeconfig.requirements(config, None, None, None)
