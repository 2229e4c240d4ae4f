"""The sensitivity benchmark's one trial, as real processes: ``ds4ci gate`` (the CLI) against the reference
server's tiny-model double on 127.0.0.1, through the tiny models' own pinned ds4ci.toml. Unfaulted, the
successor models pass with coverage required; with a planted fault (DS4REF_FAULT) the gate catches it
on the token comparison, though the server still claims reference-exact verification."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from benchload import bench_module

pytest.importorskip("gguf")
pytest.importorskip("torch")


def _bench() -> ModuleType:
    return bench_module("sensitivity")


def test_successor_models_pass_unfaulted_with_coverage_required(tmp_path: Path) -> None:
    bench = _bench()
    argv = bench.family_args("tiny-successor", tmp_path)
    assert "require_coverage = true" in Path(argv[1]).read_text(encoding="utf-8")
    trial = bench.run_gate(argv, tmp_path, "control", None, 0)
    assert (trial["exit_code"], trial["outcome"], trial["fired_requests"]) == (0, "missed", 0), trial
    doc = json.loads((tmp_path / "control" / "results.json").read_text(encoding="utf-8"))
    assert doc["verdict"] == "pass"
    for width in doc["widths"]:
        assert width["coverage"]["unmet"] == [], width["q"]  # every minimum exercised at every width


def test_a_planted_fault_is_caught_by_the_token_comparison(tmp_path: Path) -> None:
    bench = _bench()
    argv = bench.family_args("tiny-random", tmp_path)
    trial = bench.run_gate(argv, tmp_path, "skip-restore-1", "skip-restore", 1)
    assert trial["exit_code"] == 1 and trial["outcome"] == "parity", trial
    assert trial["fired_requests"] > 0
    log = (tmp_path / "skip-restore-1" / "fault.jsonl").read_text(encoding="utf-8").splitlines()
    assert {json.loads(x)["fault"] for x in log} == {"skip-restore"}
