"""The runner table of a ds4ci.toml: what the gate workflow's matrix is made of."""

from __future__ import annotations

from typing import Any

import pytest

from ds4ci.errors import UsageError
from ds4ci.options import runners
from ds4ci.options.runners import RunnerSpec


def test_runner_tables_in_file_order_with_labels_defaulting_to_self_hosted_and_the_name() -> None:
    doc = {"runners": {"sm86": {"role": "negative-control", "negative_control_for": "gfx1151"},
                       "gfx1151": {"labels": ["self-hosted", "rocm", "gfx1151"], "target_device": "hip:0"}}}
    assert runners.from_doc(doc, "ds4ci.toml") == (
        RunnerSpec("sm86", ("self-hosted", "sm86"), "sm86", "negative-control"),
        RunnerSpec("gfx1151", ("self-hosted", "rocm", "gfx1151"), "gfx1151", "gate"),
    )


def test_runner_section_values_apply_to_every_runner_unless_its_table_sets_them() -> None:
    doc = {"runner": {"labels": ["self-hosted", "lab"], "role": "negative-control"},
           "runners": {"a": {}, "b": {"labels": ["self-hosted", "b"], "role": "gate"}}}
    assert runners.from_doc(doc, "f") == (RunnerSpec("a", ("self-hosted", "lab"), "a", "negative-control"),
                                         RunnerSpec("b", ("self-hosted", "b"), "b", "gate"))


def test_without_runner_tables_the_runner_name_is_the_one_runner() -> None:
    assert runners.from_doc({"runner": {"name": "box"}}, "f") == (RunnerSpec("box", ("self-hosted", "box"), "box"),)


@pytest.mark.parametrize(("doc", "said"), [
    ({}, "names no runner"),
    ({"runners": {"a": {"labels": ["self-hosted", "self-hosted"]}}}, "a label is listed twice"),
    ({"runners": {"a": {"labels": []}}}, "non-empty list of runner labels"),
    ({"runners": {"bad name": {}}}, "[runners.bad name]: expected letters"),
    ({"runners": {"a": "x"}}, "entries must be tables"),
    ({"runner": {"labes": ["x"]}, "runners": {"a": {}}}, "[runner]: unknown key(s) labes"),
])
def test_a_table_that_cannot_make_a_matrix_is_refused(doc: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError) as caught:
        runners.from_doc(doc, "f")
    assert said in str(caught.value)


def test_the_json_form_round_trips_and_is_checked() -> None:
    table = (RunnerSpec("a", ("self-hosted", "a"), "a", "gate"), RunnerSpec("b", ("x",), "q", "negative-control"))
    assert runners.parse_json(runners.to_json(table)) == table
    assert runners.parse_json('[{"name": "a", "labels": ["x"], "queue": "a"}]') == (RunnerSpec("a", ("x",), "a", "gate"),)
    for text, said in [('[{"name": "a", "labels": ["x"], "queue": "a", "extra": 1}]', "optionally role"),
                       ('[{"name": "a", "labels": ["x"], "queue": "a", "role": "judge"}]', "role: expected one of"),
                       ('[{"name": "a", "labels": ["x"], "queue": "a"}, {"name": "a", "labels": ["x"], "queue": "b"}]',
                        "unique"), ("[]", "non-empty JSON array"), ("{", "not valid JSON")]:
        with pytest.raises(UsageError) as caught:
            runners.parse_json(text)
        assert said in str(caught.value), text
