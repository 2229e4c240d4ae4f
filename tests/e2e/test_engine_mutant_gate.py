"""One engine mutant through the whole gate: ``ds4ci gate`` (the CLI) against the reference server's tiny-model
double on 127.0.0.1 with the shipped tiny config, DS4REF_FAULT=no-rollback set for that server command only
(its speculative arms). The server still claims reference-exact verification; the gate fails every width."""

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


def test_no_rollback_fails_the_gate_at_every_width(tmp_path: Path) -> None:
    bench = _bench()
    argv = bench.family_args("tiny-successor", tmp_path)  # the shipped tiny models, seed 1, their ds4ci.toml
    trial = bench.run_gate(argv, tmp_path, "no-rollback", "no-rollback", 0)
    assert trial["exit_code"] == 1 and trial["outcome"] == "parity", trial
    doc = json.loads((tmp_path / "no-rollback" / "results.json").read_text(encoding="utf-8"))
    assert doc["verdict"] == "fail"
    assert [(w["q"], w["verdict"]) for w in doc["widths"]] == [(2, "fail"), (3, "fail"), (4, "fail")]
    log = [json.loads(x) for x in (tmp_path / "no-rollback" / "fault.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["fault"] for r in log} == {"no-rollback"} and len(log) == trial["fired_requests"] > 0
