"""The one strict reader of server- and PR-produced JSON: every refusal is a StrictJsonError, never a crash."""

from __future__ import annotations

import json

import pytest

from ds4ci.judging import strictjson


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": NaN}', "non-standard JSON constant NaN"),
        ('[Infinity]', "non-standard JSON constant Infinity"),
        ('[-Infinity]', "non-standard JSON constant -Infinity"),
        ("[1e999]", "number 1e999 overflows"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("[" * 100_000 + "]" * 100_000, "nested 100000 levels deep; expected at most 64"),
        ("[" * 100_000, "nested 100000 levels deep"),
        ('{"a": [1, 2', "not valid JSON"),
        ("1" * 5000, "unreadable JSON value"),
    ],
)
def test_refused_with_a_reason(text: str, said: str) -> None:
    with pytest.raises(strictjson.StrictJsonError, match=r"^the answer: ") as caught:
        strictjson.loads(text.encode(), "the answer")
    assert said in str(caught.value)


def test_not_utf8_is_refused() -> None:
    with pytest.raises(strictjson.StrictJsonError, match="not UTF-8"):
        strictjson.loads(b'{"a": "\xff"}', "x")


def test_depth_counts_brackets_outside_strings_only() -> None:
    assert strictjson.depth('{"a": [[1], {"b": "[[[[{{{{"}], "c": "\\"]]]"}') == 3
    assert strictjson.depth("3") == 0


def test_sixty_four_levels_are_read_and_sixty_five_refused() -> None:
    assert strictjson.loads("[" * 64 + "]" * 64, "x") == json.loads("[" * 64 + "]" * 64)
    with pytest.raises(strictjson.StrictJsonError, match="nested 65 levels"):
        strictjson.loads("[" * 65 + "]" * 65, "x")


def test_a_plain_answer_reads_as_json_does() -> None:
    text = '{"choices": [{"message": {"content": "w1 w2"}}], "usage": {"completion_tokens": 2}, "x": 1.5e3}'
    assert strictjson.loads(text, "x") == json.loads(text)
