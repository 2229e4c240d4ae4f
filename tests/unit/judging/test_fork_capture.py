"""The first public reference-exact build (fork Nuked88/lucebox 41ee7d0) as it ran on an H200, judged on its real lines.

``tests/data/real-server/h200-fork-41ee7d0/gate.bundle.tar.gz`` is our sealed capture of ``ds4ci gate`` with
the tiny models (seed 1): every speculative request printed the banner and a counterless summary
(``gen=95 steps=95 mean_accept=0.00/1.00 q_cap=2 full_snap=1``), no trace in any arm. Each test
changes one thing in a copy of the real evidence and checks the verdict and its reason.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

from paths import TESTS

from ds4ci.evidence.derive import derive
from ds4ci.judging import judge
from ds4ci.judging.tinywords import KNOWN_TARGETS

FORK = TESTS / "data" / "real-server" / "h200-fork-41ee7d0"
# The capture ran the first tiny models, now written by `ds4ci tiny-models --kind random --seed 1`.
FORK_TARGET = "340fd97fff73dc755f918f8bd0e89ea37b3430c4fb66b81c903e05fd5a40b360"


def _attempt(tmp_path: Path) -> Path:
    with tarfile.open(FORK / "gate.bundle.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (attempt,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return attempt


def _edit(path: Path, old: str, new: str, count: int = 0) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, count or -1), encoding="utf-8")


def test_the_real_fork_capture_passes_every_width_and_is_an_error_for_its_modified_tree(tmp_path: Path) -> None:
    doc = derive(_attempt(tmp_path))
    # that gate ran in a ds4ci checkout with uncommitted changes (revisions.dirty), which is never green by default
    assert (doc["verdict"], doc["exit_code"]) == ("error", 3) and doc["revisions"]["dirty"] is True
    assert len(doc["reasons"]) == 1 and doc["reasons"][0].startswith("built from a modified tree: ")
    assert [w["verdict"] for w in doc["widths"]] == ["pass", "pass", "pass"] and doc["target_only"]["verdict"] == "pass"
    assert doc["target_only"]["oracle"] == "tiny-model words"
    assert doc["identities"]["target"] is not None and doc["identities"]["target"]["sha256"] in KNOWN_TARGETS
    for width in doc["widths"]:
        q = width["q"]
        assert width["oracle"] == "tiny-model words"
        shown = {k: v for k, v in width["evidence"].items() if v}
        assert shown == {"banner": 4, "summary-plain": 4}  # no trace, no per-step line, no spec_decode_ran
        for cell in width["prompts"]:
            assert (cell["steps"], cell["matched"], cell["offered"], cell["counters"]) == (95, 0, 95 * (q - 1), "derived")
            assert cell["rejection_observed"] and cell["parity_requests"] == 2 and cell["tokens_spec"] == 96


def test_a_divergent_answer_fails_naming_the_position(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    response = attempt / "requests" / "q3" / "p1-r2.response.json"
    doc = json.loads(response.read_text(encoding="utf-8"))
    words = doc["choices"][0]["message"]["content"].split(" ")
    words[11] = "w1"  # position 10 (the text starts with a space)
    doc["choices"][0]["message"]["content"] = " ".join(words)
    response.write_text(json.dumps(doc), encoding="utf-8")
    derived = derive(attempt)
    assert derived["verdict"] == "fail" and derived["exit_code"] == 1
    (reason,) = [r for r in derived["reasons"] if "token IDs differ" in r]
    assert reason.startswith("q=3 prompt 1 request 2: token IDs differ: first differing position 10")


def test_a_run_without_a_rejection_is_an_error_never_a_fail(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    # every draft accepted at q=2: 48 steps of two tokens, the last cut to one; the answers agree, so
    # nothing is proven wrong: the rejection the proof needs is missing (error)
    _edit(attempt / "servers" / "q2" / "stderr.log", "gen=95 steps=95 mean_accept=0.00/1.00",
          "gen=95 steps=48 mean_accept=1.00/1.00")
    derived = derive(attempt)
    assert derived["verdict"] == "error"
    assert any("no rejection observed (matched=48 == offered=48 (derived from the counterless summary))" in r
               for r in derived["reasons"]), derived["reasons"]


def test_means_that_contradict_the_loops_arithmetic_fail_naming_both(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _edit(attempt / "servers" / "q4" / "stderr.log", "gen=95 steps=95 mean_accept=0.00/3.00",
          "gen=95 steps=95 mean_accept=0.40/3.00", count=1)
    reasons = derive(attempt)["reasons"]
    # 38/95 prints as 0.40, but 38 accepted drafts and 95 steps would emit at least 133 tokens, not 95
    assert any("q=4 prompt 0 request 1: no matched count fits the evidence: mean_accept=0.40/3.00 over steps=95 "
               "allows 38, gen=95 <= matched + steps <= gen + q - 1 allows none" in r for r in reasons), reasons


def test_a_build_with_the_mode_but_no_token_ids_is_an_error_with_the_true_reason(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    # the same evidence, but the target is not one of ds4ci's tiny models
    _edit(attempt / "identities.json", FORK_TARGET, "0" * 64)
    doc = derive(attempt)
    assert (doc["verdict"], doc["exit_code"]) == ("error", 3)
    assert doc["reasons"][0] == judge.no_ids_reason(banner=True)
    assert len(doc["reasons"]) == 2 and doc["reasons"][1].startswith("built from a modified tree: ")
    assert doc["reasons"][0].startswith("this build has the reference-exact mode (banner seen) but prints no token IDs")
    assert "no reference-exact mode" not in doc["reasons"][0]
    assert doc["target_only"]["oracle"] is None and all(w["oracle"] is None for w in doc["widths"])


def test_the_answers_look_never_makes_the_oracle(tmp_path: Path) -> None:
    """Answers that spell tiny-model words do not make the words an oracle: only the pinned target does."""
    attempt = _attempt(tmp_path)
    _edit(attempt / "identities.json", FORK_TARGET, "1" * 64)
    assert derive(attempt)["verdict"] == "error"


def test_the_ar_fallback_line_fails_the_request(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    line = ("[deepseek4] DSpark spec loaded but this request decodes AR: force_ar=0 stop_tokens=0 sampling=1 "
            "(temp=0.70 rep_pen=1.00 freq_pen=0.00 pres_pen=0.00; greedy needs temperature 0)")
    _edit(attempt / "servers" / "q2" / "stderr.log", "[ds4-spec] reference-exact verifier:",
          f"{line}\n[ds4-spec] reference-exact verifier:", count=1)
    doc = derive(attempt)
    assert doc["verdict"] == "fail"
    assert any(r.startswith("q=2 prompt 0 request 1: the server decoded a request without speculation (stderr): "
                            "[deepseek4] DSpark spec loaded but this request decodes AR") for r in doc["reasons"])
    assert doc["widths"][0]["evidence"]["ar-fallback"] == 1


def test_a_newer_failure_line_fails_the_request(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _edit(attempt / "servers" / "q3" / "stderr.log", "[ds4-spec] gen=95 steps=95 mean_accept=0.00/2.00",
          "[ds4-spec] wide rollback replay failed\n[ds4-spec] gen=95 steps=95 mean_accept=0.00/2.00", count=1)
    reasons = derive(attempt)["reasons"]
    assert ("q=3 prompt 0 request 1: speculation or rollback failed on the server (stderr): "
            "[ds4-spec] wide rollback replay failed") in reasons


def test_a_malformed_per_step_line_fails_its_request(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _edit(attempt / "servers" / "q2" / "stderr.log", "[ds4-spec] gen=95 steps=95 mean_accept=0.00/1.00",
          "[ds4-spec-cmp] step=0 pos=97 draft=[330 -1 -1] tgt=[772 912 -1 -1] acc=2\n"
          "[ds4-spec] gen=95 steps=95 mean_accept=0.00/1.00", count=1)
    reasons = derive(attempt)["reasons"]
    assert any(r.startswith("q=2 prompt 0 request 1: malformed per-step line on stderr (acc=2 contradicts") for r in reasons)


def test_spec_decode_ran_false_fails(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    response = attempt / "requests" / "q4" / "p0-r1.response.json"
    doc = json.loads(response.read_text(encoding="utf-8"))
    doc["usage"]["spec_decode_ran"] = False
    response.write_text(json.dumps(doc), encoding="utf-8")
    reasons = derive(attempt)["reasons"]
    assert "q=4 prompt 0 request 1: the answer says usage.spec_decode_ran=false: this request did not speculate" in reasons


def test_gen_must_be_one_less_than_the_answers_tokens(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _edit(attempt / "servers" / "q3" / "stderr.log", "gen=95 steps=95 mean_accept=0.00/2.00",
          "gen=94 steps=94 mean_accept=0.00/2.00", count=1)
    reasons = derive(attempt)["reasons"]
    assert any("the summary says gen=94 but the answer has 96 token(s)" in r for r in reasons), reasons


def test_the_sealed_capture_kept_what_ds4ci_said_then(tmp_path: Path) -> None:
    """The bundle as sealed on the H200 (results.json of ds4ci 67f735b) is kept beside the re-judged one."""
    with tarfile.open(FORK / "gate.as-sealed.bundle.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/results.json"))
        sealed = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    assert sealed["verdict"] == "error" and "no reference-exact mode" in sealed["reasons"][0]
    assert re.search(r"predates reference-exact verification", json.dumps(sealed["widths"]))


def _opt_in_text_parity(attempt: Path) -> None:
    """The capture as a run on a target that is not ds4ci's, with [gate] text_parity = true recorded."""
    _edit(attempt / "identities.json", FORK_TARGET, "0" * 64)
    doc = json.loads((attempt / "attempt.json").read_text(encoding="utf-8"))
    doc["settings"]["text_parity"] = True
    (attempt / "attempt.json").write_text(json.dumps(doc), encoding="utf-8")


def test_with_the_text_parity_opt_in_the_real_capture_passes_labelled_text_parity(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _opt_in_text_parity(attempt)
    doc = derive(attempt)
    assert [w["verdict"] for w in doc["widths"]] == ["pass", "pass", "pass"] and doc["target_only"]["verdict"] == "pass"
    assert len(doc["reasons"]) == 1 and doc["reasons"][0].startswith("built from a modified tree: ")
    assert doc["target_only"]["oracle"] == "text parity" and all(w["oracle"] == "text parity" for w in doc["widths"])
    for width in doc["widths"]:
        for cell in width["prompts"]:  # no token counts are claimed; the counters still prove the rollback
            assert cell["tokens_target"] is None and cell["tokens_spec"] is None and cell["parity_requests"] == 2
            assert cell["counters"] == "derived" and cell["rejection_observed"]


def test_with_the_text_parity_opt_in_a_text_divergence_fails_naming_the_character(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _opt_in_text_parity(attempt)
    response = attempt / "requests" / "q3" / "p1-r2.response.json"
    answer = json.loads(response.read_text(encoding="utf-8"))
    text = answer["choices"][0]["message"]["content"]
    answer["choices"][0]["message"]["content"] = text[:-1] + ("0" if text[-1] != "0" else "1")
    response.write_text(json.dumps(answer), encoding="utf-8")
    doc = derive(attempt)
    assert doc["verdict"] == "fail"
    (reason,) = [r for r in doc["reasons"] if "answer texts differ (text parity)" in r]
    assert reason.startswith(f"q=3 prompt 1 request 2: answer texts differ (text parity): the answer texts first differ "
                             f"at character {len(text) - 1} ")
    assert doc["widths"][1]["prompts"][1]["mismatch"] is None  # no token-ID mismatch record for text


def _write_exact_traces(attempt: Path) -> None:
    """Each server's exact-differential trace in the real writer's shape, its tokens the answers' own IDs."""
    from ds4ci.judging.tinywords import ids_from_text

    head = '{"schema":"lucebox.ds4.exact-diff/v1",'
    for server in sorted((attempt / "servers").iterdir()):
        life = json.loads((server / "lifecycle.json").read_text(encoding="utf-8"))
        lines = [head + '"type":"model_config","n_swa":128,"compressor_boundaries":[4,128]}']
        for k, entry in enumerate(life["requests"]):
            answer = json.loads((attempt / entry["response"]).read_text(encoding="utf-8"))
            ids = ids_from_text(answer["choices"][0]["message"]["content"])
            lines += [
                head + f'"type":"request_start","request":{k},"width":1,"restored":false,"cache_position":0,'
                '"prompt_tokens":1,"prompt_token_hash":"af63bd4c8601b7be","prompt_token_ids":[0],"n_gen":96,'
                '"snap_slot":-1,"snap_pos":-1,"temperature":0,"top_p":1,"top_k":0,"seed":1234}',
                head + f'"type":"tokens","request":{k},"token_ids":{json.dumps(ids).replace(" ", "")}}}',
                head + f'"type":"request_end","request":{k},"ok":true,"cache_position":97}}',
            ]
        (server / "exact-trace.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_exact_differential_traces_give_the_ids_on_any_target(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _edit(attempt / "identities.json", FORK_TARGET, "0" * 64)
    _write_exact_traces(attempt)
    doc = derive(attempt)
    assert [w["verdict"] for w in doc["widths"]] == ["pass", "pass", "pass"] and doc["target_only"]["verdict"] == "pass"
    assert doc["target_only"]["oracle"] == "exact-differential trace"
    assert all(w["oracle"] == "exact-differential trace" for w in doc["widths"])


def test_a_linked_exact_trace_in_the_evidence_is_refused(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _write_exact_traces(attempt)
    trace = attempt / "servers" / "q2" / "exact-trace.jsonl"
    trace.rename(tmp_path / "elsewhere.jsonl")
    trace.symlink_to(tmp_path / "elsewhere.jsonl")
    doc = derive(attempt)
    assert doc["widths"][0]["verdict"] == "fail"
    assert any(r.startswith("q=2: servers/q2/exact-trace.jsonl: ") for r in doc["widths"][0]["reasons"])


def test_an_arm_without_an_exact_trace_fails_while_another_has_one(tmp_path: Path) -> None:
    attempt = _attempt(tmp_path)
    _write_exact_traces(attempt)
    (attempt / "servers" / "target-only" / "exact-trace.jsonl").unlink()
    doc = derive(attempt)
    assert doc["target_only"]["verdict"] == "fail"
    assert any("no exact-differential trace was collected from this server" in r for r in doc["target_only"]["reasons"])
