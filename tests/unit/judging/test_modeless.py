"""Builds without the reference-exact mode, on our own captures of the public dflash_server (62880e2) on an H200.

- public: the unmodified build; target-only answered every request, every speculative server aborted
  (GGML_ASSERT "tensor read out of bounds") on its first request.
- fixed-verify: the same source with the one-line fix of that read; every request of every arm was
  answered, and the speculative answers' IDs differ from target-only's.
Neither printed a trace or a countered summary.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from paths import TESTS

from ds4ci.evidence.derive import derive
from ds4ci.judging import judge, modeless
from ds4ci.judging.protocol import scan_log
from ds4ci.judging.tinywords import ids_from_text, word

CAPTURES = TESTS / "data" / "real-server" / "h200-62880e2"
SPEC = ["q2", "q3", "q4"]


def _attempt(name: str, tmp_path: Path) -> Path:
    with tarfile.open(CAPTURES / f"{name}.bundle.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (attempt,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return attempt


def _widths(attempt: Path) -> list:
    return json.loads((attempt / "results.json").read_text(encoding="utf-8"))["widths"]


@pytest.mark.parametrize("name", ["public", "fixed-verify"])
def test_real_build_without_the_mode_gets_the_one_reason(name: str, tmp_path: Path) -> None:
    attempt = _attempt(name, tmp_path)
    assert modeless.no_mode_reason(attempt, ["target-only", *SPEC]) == modeless.NO_MODE
    doc = json.loads((attempt / "results.json").read_text(encoding="utf-8"))
    verdict, reasons = judge.overall([], doc["target_only"], doc["widths"], doc["checks"], doc["build"], attempt=attempt)
    assert (verdict, reasons) == ("error", [modeless.NO_MODE])
    assert (doc["verdict"], doc["reasons"], doc["exit_code"]) == ("error", [modeless.NO_MODE], 3)


def test_one_trace_line_in_any_arm_means_the_build_has_the_mode(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    with (attempt / "servers" / "q3" / "stderr.log").open("a", encoding="utf-8") as log:
        log.write("[ds4-exact-verify-trace] reference_exact=1 speculation=1 n=2 ids=[300 301]\n")
    assert modeless.no_mode_reason(attempt, ["target-only", *SPEC]) is None
    doc = json.loads((attempt / "results.json").read_text(encoding="utf-8"))
    verdict, reasons = judge.overall([], doc["target_only"], doc["widths"], doc["checks"], doc["build"], attempt=attempt)
    assert verdict == "fail" and modeless.NO_MODE not in reasons


def test_a_countered_summary_alone_also_means_the_mode(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    with (attempt / "servers" / "q2" / "stdout.log").open("a", encoding="utf-8") as log:
        log.write("[ds4-spec] gen=9 steps=4 matched=5 offered=12 mean_accept=1.25/3.00 q_cap=2 full_snap=1\n")
    assert modeless.no_mode_reason(attempt, ["target-only", *SPEC]) is None


def test_a_malformed_summary_naming_counters_still_claims_the_mode(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    with (attempt / "servers" / "q4" / "stderr.log").open("a", encoding="utf-8") as log:
        log.write("[ds4-spec] gen=9 steps=4 matched=5.0 offered=12.0 q_cap=4 full_snap=1\n")
    assert modeless.no_mode_reason(attempt, ["target-only", *SPEC]) is None


def test_the_real_counterless_summary_is_what_the_build_printed(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    text = (attempt / "servers" / "q2" / "stderr.log").read_text(encoding="utf-8")
    assert "[ds4-spec] gen=95 steps=95 mean_accept=0.00/0.75 q_cap=2 full_snap=0" in text
    assert "matched=" not in text and "offered=" not in text


def test_no_reason_when_target_only_answered_nothing(tmp_path: Path) -> None:
    attempt = _attempt("public", tmp_path)
    life_path = attempt / "servers" / "target-only" / "lifecycle.json"
    life = json.loads(life_path.read_text(encoding="utf-8"))
    for entry in life["requests"]:
        entry["answered"] = False
    life_path.write_text(json.dumps(life), encoding="utf-8")
    doc = json.loads((attempt / "results.json").read_text(encoding="utf-8"))
    _, reasons = judge.overall([], doc["target_only"], doc["widths"], doc["checks"], doc["build"], attempt=attempt)
    assert modeless.NO_MODE not in reasons


def test_answers_of_the_fixed_build_differ_from_target_only_in_the_cells(tmp_path: Path) -> None:
    """No verdict for a build without the mode, but each cell still names where its words differ from target-only's."""
    doc = derive(_attempt("fixed-verify", tmp_path))
    assert doc["verdict"] == "error" and doc["reasons"] == [modeless.NO_MODE]
    first = {(w["q"], c["prompt_index"]): c["mismatch"]["position"] for w in doc["widths"] for c in w["prompts"]}
    assert first == {(q, p): (2, 5)[p] for q in (2, 3, 4) for p in (0, 1)}
    assert all(w["oracle"] == "tiny-model words" for w in doc["widths"])


def test_aborted_arms_have_no_answer_to_compare(tmp_path: Path) -> None:
    doc = derive(_attempt("public", tmp_path))
    assert all(w["prompts"] == [] and "server exited with code -6" in w["reasons"][0] for w in doc["widths"])


def test_identical_answers_are_judged_equal(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    for name in ("p0-r1", "p1-r1", "p0-r2", "p1-r2"):
        shutil.copy(attempt / "requests" / "target-only" / f"{name}.response.json",
                    attempt / "requests" / "q4" / f"{name}.response.json")
    (q4,) = [w for w in derive(attempt)["widths"] if w["q"] == 4]
    assert [(c["mismatch"], c["parity_requests"]) for c in q4["prompts"]] == [(None, 2), (None, 2)]


def test_real_answers_spell_96_tiny_token_ids(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    doc = json.loads((attempt / "requests" / "target-only" / "p0-r1.response.json").read_text(encoding="utf-8"))
    ids = ids_from_text(doc["choices"][0]["message"]["content"])
    assert ids is not None and len(ids) == doc["usage"]["completion_tokens"] == 96
    assert "".join(word(i) for i in ids) == doc["choices"][0]["message"]["content"]


def test_tiny_words_refuse_anything_else() -> None:
    assert ids_from_text(" w7 w300") == [7, 300]
    assert ids_from_text("") == []
    for text in (" w7 x", " w07", " w-1", " w7\u00e9", "w"):
        assert ids_from_text(text) is None


def test_real_logs_hold_no_trusted_line_but_the_abort_is_there(tmp_path: Path) -> None:
    attempt = _attempt("public", tmp_path)
    stderr = attempt / "servers" / "q2" / "stderr.log"
    assert scan_log(stderr, "stderr", 100).records == ()
    text = stderr.read_text(encoding="utf-8")
    assert 'GGML_ASSERT(offset + size <= ggml_nbytes(tensor) && "tensor read out of bounds") failed' in text
    assert "[deepseek4] DSpark spec-decode ENABLED" in text
    life = json.loads((attempt / "servers" / "q2" / "lifecycle.json").read_text(encoding="utf-8"))
    assert life["stop"]["exit_code"] == -6 and life["requests"][0]["answered"] is False
    target = json.loads((attempt / "servers" / "target-only" / "lifecycle.json").read_text(encoding="utf-8"))
    assert target["stop"]["exit_code"] == 0 and all(e["answered"] for e in target["requests"])
    assert (attempt / "servers" / "target-only" / "stdout.log").read_bytes() == b""


def test_props_cannot_tell_the_arms_apart(tmp_path: Path) -> None:
    attempt = _attempt("fixed-verify", tmp_path)
    for key in ("target-only", *SPEC):
        props = json.loads((attempt / "servers" / key / "props.json").read_text(encoding="utf-8"))
        assert props["server"] == {"name": "luce-dflash", "props_schema": 2, "version": "0.0.0+cpp"}
        assert props["speculative"]["enabled"] is False and props["speculative_mode"] == "off"
        assert props["capabilities"]["speculative_supported"] is False and props["model"]["draft_path"] is None
    text = (attempt / "servers" / "q2" / "stderr.log").read_text(encoding="utf-8")
    assert "[deepseek4] DSpark spec-decode ENABLED" in text  # the draft was loaded all the same
