"""Clause 8 (docs/protocol.md): the HTTP answer agrees with the trace, on the real server's answer shape.

``tests/data/real-server/h200-62880e2.response.json`` is the public dflash_server's answer to one
request on an H200 (16 tokens, ``finish_reason`` "length").
"""

from __future__ import annotations

import json

from paths import TESTS

from ds4ci.evidence.differ import first_difference
from ds4ci.judging.answer import read_answer
from ds4ci.judging.oracle import Observed, check_trace
from ds4ci.judging.protocol import RequestLog, parse_trace
from ds4ci.judging.verdict import FAIL, PASS, judge_target_only

REAL = json.loads((TESTS / "data" / "real-server" / "h200-62880e2.response.json").read_text())
TRACE = parse_trace(f"reference_exact=0 speculation=0 n=16 ids=[{' '.join(str(i) for i in range(16))}]")


def _observed(repeat: int, response: object) -> Observed:
    return Observed(0, repeat, RequestLog((TRACE,), 0, (), ()), True, read_answer(response))


def test_the_real_answer_is_read_whole() -> None:
    answer = read_answer(REAL)
    assert (answer.finish_reason, answer.completion_tokens, answer.problems) == ("length", 16, ())
    assert answer.text == REAL["choices"][0]["message"]["content"]


def test_completion_tokens_must_equal_the_traces_n() -> None:
    assert check_trace(_observed(0, REAL), "here", 0, 0).reasons == []
    off = {**REAL, "usage": {**REAL["usage"], "completion_tokens": 17}}
    assert check_trace(_observed(0, off), "here", 0, 0).reasons == [
        "here: the server's answer says completion_tokens=17 but its trace says n=16: "
        "the server's answer contradicts its own trace"
    ]


def test_an_answer_without_text_reason_or_count_is_a_reason_each() -> None:
    reasons = check_trace(_observed(0, {"choices": [], "usage": {"completion_tokens": True}}), "here", 0, 0).reasons
    assert reasons == [
        "here: the server's answer has no choices[0].message.content text (exactly one choice expected)",
        "here: the server's answer has no choices[0].finish_reason",
        "here: the server's answer has no integer usage.completion_tokens",
    ]


def test_equal_ids_with_other_text_contradict_the_trace() -> None:
    other = json.loads(json.dumps(REAL))
    other["choices"][0]["message"]["content"] += " more"
    assert judge_target_only([_observed(0, REAL), _observed(1, REAL)], 1).verdict == PASS
    found = judge_target_only([_observed(0, REAL), _observed(1, other)], 1)
    assert found.verdict == FAIL and found.reasons == [
        "target-only prompt 0 request 2: the server's answer contradicts its own trace "
        "(the same token IDs as request 1, a different text)"
    ]


def test_verify_names_the_first_differing_key_path() -> None:
    recorded = {"checks": [{"name": "a", "status": "pass"}], "verdict": "pass"}
    derived = {"checks": [{"name": "a", "status": "fail"}], "verdict": "fail"}
    assert first_difference(recorded, derived) == "checks[0].status recorded pass, derived fail"
    assert first_difference({"a": [1]}, {"a": [1, 2]}) == "a[1] recorded absent, derived 2"
    assert first_difference({"a": 1}, {"a": 1.0}) == "a recorded 1, derived 1.0"
    assert first_difference({"a": {"b": None}}, {"a": {"b": None}}) is None
