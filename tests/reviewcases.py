"""The comments a reviewer reads, one per kind of outcome: each case's documents and the base branch's results.

Shared by the golden comments (tests/unit/report/test_review_comments.py) and their browser rendering
(tests/e2e/test_review_render.py). The documents are the fixtures in tests/data/results, changed where a case
needs it (a difference at position 42 in a tiny model's words, a crashed server, a failed build, a third runner).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from paths import TESTS

from ds4ci.evidence.results import load
from ds4ci.judging.tinywords import KNOWN_TARGETS
from ds4ci.report import render
from ds4ci.report.docview.compare import BaseResult
from ds4ci.report.docview.figures import WidthFigures

DATA = TESTS / "data" / "results"
RUN_URL = "https://github.com/acme/engine/actions/runs/7"
REPO = "acme/engine"
BASE = "ba5e" * 10
TINY = next(iter(KNOWN_TARGETS))  # the shipped tiny target: its token IDs decode to words
VOUCHED = "run 7001 (.github/workflows/gate.yml, workflow_dispatch on main, job 'verdict gfx1151' success in attempt 1)"


def doc(name: str) -> dict[str, Any]:
    return copy.deepcopy(load(DATA / f"{name}.json"))


def _at_42(d: dict[str, Any]) -> dict[str, Any]:
    """The failing fixture with its first difference at position 42 of an answer of the tiny model."""
    d["identities"]["target"]["sha256"] = TINY
    prompt = d["widths"][0]["prompts"][0]
    prompt["mismatch"] = {"position": 42, "window_start": 38, "target_len": 96, "spec_len": 96,
                          "target_ids": [417, 88, 1203, 5, 77, 9, 310, 42], "spec_ids": [417, 88, 1203, 5, 78, 9, 310, 42]}
    d["reasons"] = ["q=2 prompt 0: token IDs differ from target-only at position 42"]
    d["widths"][0]["reasons"] = list(d["reasons"])
    return d


def _crashed() -> dict[str, Any]:
    d = doc("error")
    d["reasons"] = ["q=3 server exited with signal 11 (SIGSEGV) before it was ready"]
    return d


def _build_failed() -> dict[str, Any]:
    d = doc("error")
    d["verdict"], d["exit_code"] = "fail", 1
    d["reasons"] = ["the build failed: exit 1 (2/3 targets built); last lines: src/spec/verify.cpp:88:12: error: "
                    "'draft_len' was not declared in this scope"]
    d["build"] = {"command": "cmake --build build -j16", "cwd": "/home/runner/work/engine/engine",
                  "server_bin": "build/bin/dflash_server", "status": "fail", "exit_code": 1, "duration_s": 212.4,
                  "targets_built": 2, "targets_total": 3, "summary": "the build failed: exit 1 (2/3 targets built)",
                  "log_tail": "[ 66%] Building CXX object src/spec/CMakeFiles/spec.dir/verify.cpp.o\n"
                              "/home/runner/work/engine/engine/src/spec/verify.cpp:88:12: error: 'draft_len' was not "
                              "declared in this scope\ngmake[2]: *** [src/spec/CMakeFiles/spec.dir/build.make:76] Error 1"}
    return d


def _renamed(d: dict[str, Any], name: str, gpu: str) -> dict[str, Any]:
    d["runner"]["name"] = name
    if d["fingerprint"] and d["fingerprint"]["gpus"]:
        d["fingerprint"]["gpus"][0]["name"] = gpu
    return d


def base_pass(runner: str = "gfx1151") -> BaseResult:
    return BaseResult(BASE, "success", VOUCHED.replace("gfx1151", runner),
                      (WidthFigures(2, "pass", 47, 49, 118.0), WidthFigures(3, "pass", 63, 70, 121.0),
                       WidthFigures(4, "pass", 70, 84, 125.0)), 1140.0, None)


def base_fail(runner: str = "gfx1151") -> BaseResult:
    return BaseResult(BASE, "failure", VOUCHED.replace("success", "failure").replace("gfx1151", runner),
                      (WidthFigures(2, "fail", 46, 49, 119.0), WidthFigures(3, "pass", 60, 70, 120.0),
                       WidthFigures(4, "pass", 67, 84, 124.0)), 1190.0, "q=2, position 42")


Case = tuple[list[dict[str, Any]], dict[str, BaseResult]]
CASES: dict[str, Callable[[], Case]] = {
    "review-pass": lambda: ([doc("pass"), doc("pass-second-runner")],
                            {"gfx1151": base_pass(), "gfx1151-b": base_pass("gfx1151-b")}),
    "review-fail-new": lambda: ([_at_42(doc("fail"))], {"gfx1151": base_pass()}),
    "review-fail-pre-existing": lambda: ([_at_42(doc("fail"))], {"gfx1151": base_fail()}),
    "review-error-runner": lambda: ([doc("error")], {}),
    "review-error-crash": lambda: ([_crashed()], {"gfx1151": base_pass()}),
    "review-build-failure": lambda: ([_build_failed()], {"gfx1151": base_pass()}),
    "review-three-runners": lambda: ([_at_42(doc("fail")), doc("pass-second-runner"),
                                      _renamed(doc("pass"), "sm86", "NVIDIA GeForce RTX 3090")],
                                     {"gfx1151": base_fail(), "gfx1151-b": base_pass("gfx1151-b"),
                                      "sm86": base_pass("sm86")}),
}


def comment(case: str) -> str:
    docs, bases = CASES[case]()
    body, _ = render.render(docs, kind="comment", run_url=RUN_URL, bases=bases, repo=REPO)
    return body
