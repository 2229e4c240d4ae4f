"""The real gate against the simulator speaking the fork dialect (41ee7d0): banner, counterless summary, no trace.

The simulator (a real process on loopback) prints what that build printed on the H200
(tests/data/real-server/h200-fork-41ee7d0/), its answers spell the tiny models' words, and the
target is ds4ci's own tiny model (``ds4ci tiny-models --seed 1``), pinned by SHA-256: the gate
reads both arms' token IDs from the words and derives the counters from the means.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, GateRun, Workspace

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ds4ci.tinymodels.bundle import write_tiny_set

    return write_tiny_set(tmp_path_factory.mktemp("tiny"), 1).target


def _gate(tmp_path: Path, target: Path | None, faults: str) -> GateRun:
    ws = Workspace.create(tmp_path)
    if target is not None:
        ws.target = tmp_path / "models" / "tiny-target.gguf"
        shutil.copy(target, ws.target)
    return ws.gate(faults=faults, widths="2,3")


def test_the_fork_dialect_passes_on_the_tiny_models_words(tmp_path: Path, tiny_target: Path) -> None:
    run = _gate(tmp_path, tiny_target, "fork-dialect")
    assert run.code == 0, run.stderr[-3000:]
    doc = run.results
    assert doc is not None and doc["verdict"] == "pass"
    assert doc["target_only"]["oracle"] == "tiny-model words"
    for width in doc["widths"]:
        assert width["oracle"] == "tiny-model words"
        evidence = width["evidence"]
        assert evidence["banner"] == evidence["summary-plain"] == 2 and evidence["trace"] == 0  # two repeats
        assert evidence["compare"] >= 1 and evidence["step-timing"] >= 1  # DS4_TIMING set by the common policy
        (cell,) = width["prompts"]
        assert cell["counters"] == "derived" and cell["offered"] == cell["steps"] * (width["q"] - 1)
        assert cell["rejection_observed"] and cell["matched"] < cell["offered"]
    for arm in doc["policy"]["arms"].values():  # the diagnostics are in both arms alike
        assert arm["DFLASH_DS4_TIMING"] == arm["LUCE_DS4_TOKEN_TRACE"] == "1"


def test_a_per_token_trace_is_judged_with_it(tmp_path: Path, tiny_target: Path) -> None:
    run = _gate(tmp_path, tiny_target, "fork-dialect,token-trace-lines")
    assert run.code == 0, run.stderr[-3000:]
    assert run.results is not None
    assert all(w["evidence"]["token-trace"] == 2 * 63 for w in run.results["widths"])  # all tokens but the seed


def test_a_divergence_fails(tmp_path: Path, tiny_target: Path) -> None:
    run = _gate(tmp_path, tiny_target, "fork-dialect,mismatch-last@q3")
    assert run.code == 1
    assert "q=3 prompt 0 requests 1, 2: token IDs differ: first differing position 63" in run.reasons()


def test_a_run_without_a_rejection_is_an_error_never_a_fail(tmp_path: Path, tiny_target: Path) -> None:
    # the answers agree: nothing is proven wrong, the rejection the proof needs cannot be shown (error, exit 3)
    run = _gate(tmp_path, tiny_target, "fork-dialect,all-accepted@q2")
    assert run.code == 3 and run.results is not None and run.results["verdict"] == "error"
    assert "q=2 prompt 0 request 1: no rejection observed" in run.reasons()


def test_the_ar_fallback_fails(tmp_path: Path, tiny_target: Path) -> None:
    run = _gate(tmp_path, tiny_target, "fork-dialect,ar-fallback@q2")
    assert run.code == 1
    assert "the server decoded a request without speculation (stderr): [deepseek4] DSpark spec loaded" in run.reasons()


def test_with_the_mode_but_no_token_ids_the_verdict_is_error_with_the_true_reason(tmp_path: Path) -> None:
    run = _gate(tmp_path, None, "fork-dialect")  # the test target is not one of ds4ci's tiny models
    assert run.code == 3
    assert run.results is not None
    (reason,) = run.results["reasons"]
    assert reason.startswith("this build has the reference-exact mode (banner seen) but prints no token IDs")


def _text_parity_gate(tmp_path: Path, faults: str) -> GateRun:
    config = tmp_path / "ds4ci.toml"
    config.write_text("[gate]\ntext_parity = true\n")
    ws = Workspace.create(tmp_path)  # the test target is not one of ds4ci's tiny models: no token-ID oracle
    return ws.gate("--config", str(config), faults=faults, widths="2,3")


def test_with_the_text_parity_opt_in_the_answers_text_is_judged_and_labelled(tmp_path: Path) -> None:
    run = _text_parity_gate(tmp_path, "fork-dialect")
    assert run.code == 0, run.stderr[-3000:]
    doc = run.results
    assert doc is not None and doc["verdict"] == "pass" and doc["settings"]["text_parity"] is True
    assert doc["target_only"]["oracle"] == "text parity"
    assert all(p["n"] is None and p["ids_sha256"] for p in doc["target_only"]["prompts"])  # no token count claimed
    for width in doc["widths"]:
        assert width["oracle"] == "text parity"
        (cell,) = width["prompts"]
        assert cell["tokens_target"] is None and cell["parity_requests"] == 2
        assert cell["counters"] == "derived" and cell["rejection_observed"]  # the rollback proof still holds
    assert "text parity" in run.stdout and "| token parity |" not in run.stdout.replace(" ", "")
    (bundle,) = (tmp_path / "evidence" / "runs").iterdir()  # verify re-derives it with the recorded opt-in
    proc = subprocess.run([DS4CI, "verify", str(bundle)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_with_the_text_parity_opt_in_a_text_divergence_fails(tmp_path: Path) -> None:
    run = _text_parity_gate(tmp_path, "fork-dialect,mismatch-last@q3")
    assert run.code == 1
    assert run.results is not None and run.results["widths"][1]["oracle"] == "text parity"
    assert "q=3 prompt 0 requests 1, 2: answer texts differ (text parity): the answer texts first differ at" in run.reasons()
    assert "token IDs differ" not in run.reasons()


def test_without_the_opt_in_the_reason_names_it(tmp_path: Path) -> None:
    run = _gate(tmp_path, None, "fork-dialect")
    assert run.code == 3 and run.results is not None
    assert "text_parity" not in run.results["settings"] or run.results["settings"]["text_parity"] is False
    assert "[gate] text_parity = true (text parity, not token parity)" in run.results["reasons"][0]
