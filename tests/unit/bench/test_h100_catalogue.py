"""The catalogue on an H100 (2026-12-07, design FIFTH_LOUD_ALIGNED, fork 41ee7d0): what the gates judged, against
where the catalogue says each mutant can act, and the schedule over the H100's own answers that places the widths
left uncaught (bench/gpu_walk_events.py; docs/benchmarks.md, "The six widths")."""

from __future__ import annotations

import json
import sys
from types import ModuleType
from typing import Any

import pytest
from paths import ROOT, TESTS

from ds4ci.calibrate.catalogue import default_catalogue, load_catalogue

sys.path.insert(0, str(ROOT / "bench"))
import gpu_walk_events

CAPTURE = TESTS / "data" / "real-server" / "h100-2026-12-07-fifth-loud-aligned"
ORDER = ROOT / "bench" / "catalogue-order-sixth.txt"
NOT_RUN = {"n-index-comp-not-restored"}  # the lease ended (the capture's README)
INTERRUPTED = {("indexer-compressor-not-restored", 4)}  # stopped by the lease's own operator: an error, no finding
# where a mutant can act and the H100's gate passed: answers and counters the control's
UNCAUGHT = {("n-comp-not-restored", 2), ("n-comp-not-restored", 4), ("n-comp-only-not-restored", 2),
            ("n-comp-only-not-restored", 4), ("compressor-last-layer-not-restored", 2)}


def _verdicts(name: str) -> dict[int, str]:
    doc = json.loads((CAPTURE / "gates" / f"{name}.results.json").read_text(encoding="utf-8"))
    assert doc["fingerprint"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and doc["fingerprint"]["gpus"][0]["arch"] == "sm_90"
    return {w["q"]: w["verdict"] for w in doc["widths"]}


def test_every_mutant_the_h100_ran_was_judged_as_the_catalogue_reads_the_source() -> None:
    catalogue = load_catalogue(default_catalogue())
    ran = {p.name.removesuffix(".results.json") for p in (CAPTURE / "gates").glob("*.results.json")}
    assert ran == {m.name for m in catalogue.mutants} - NOT_RUN | {"control", "control-2"}
    assert _verdicts("control") == _verdicts("control-2") == {2: "pass", 3: "pass", 4: "pass"}
    uncaught = set()
    for m in catalogue.mutants:
        if m.name in NOT_RUN:
            continue
        verdicts = _verdicts(m.name)
        for q, verdict in verdicts.items():
            if (m.name, q) in INTERRUPTED:
                assert verdict == "error"
            elif not m.acts_at(q):
                assert verdict == "pass", (m.name, q)  # never a catch where the catalogue says it cannot act
            elif verdict == "pass":
                uncaught.add((m.name, q))
        if any(m.acts_at(q) for q in verdicts):
            assert json.loads((CAPTURE / "gates" / f"{m.name}.results.json").read_text())["verdict"] != "pass", m.name
    assert uncaught == UNCAUGHT
    acting = sum(m.acts_at(q) for m in catalogue.mutants if m.name not in NOT_RUN for q in (2, 3, 4))
    assert (acting - len(uncaught), acting) == (56, 61)  # raw-ring-last-layer at q=2: equivalent since the reading


@pytest.fixture(scope="module")
def walk() -> ModuleType:
    return gpu_walk_events


def _schedules(walk: ModuleType, bundle: str) -> dict[tuple[int, int], dict[str, list[Any]]]:
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import CHAT_TEMPLATE_TOKENS, tiny_structure
    from ds4ci.tinymodels.shapes import Shape

    w = walk
    st = tiny_structure(1, Shape(sliding_window=16))
    guess = {t: st.guess(t) for t in st.succ}
    answers, counters = w._members(str(CAPTURE / bundle))
    longer, _ = w._members(str(CAPTURE / "control-256.bundle.tar.gz"))
    out = {}
    for q, per_prompt in counters.items():
        for index, (low, high, offered) in per_prompt.items():
            run = w.schedule(answers[index], guess, q, longer[index])
            assert low <= run.matched <= high and run.offered == offered, (bundle, q, index)  # the recorded counters
            p = design.FIFTH_LOUD_ALIGNED.prompt_bytes[index] + CHAT_TEMPLATE_TOKENS
            assert w.events_over(run, answers[index], p, st, 16, "") == {
                "n-comp": [], "compressor-last": [], "raw-ring-last": []}  # the unchanged build: none
            out[q, index] = {k: w.events_over(run, answers[index], p, st, 16, k)[k]
                             for k in ("n-comp", "compressor-last", "raw-ring-last")}
    return out


def test_the_schedule_over_the_h100_answers_reproduces_its_counters_and_places_the_uncaught_widths(walk: ModuleType) -> None:
    for bundle in ("control-96.bundle.tar.gz", "control-192.bundle.tar.gz"):
        events = _schedules(walk, bundle)
        for index in (0, 1):
            assert events[2, index]["compressor-last"] == []  # no q=2 step seeded on a ratio-128 boundary rejects
            assert events[2, index]["raw-ring-last"] == []  # equivalent at q=2: no used forward reads the slot
            assert events[2, index]["n-comp"] and all("replay" in e.kind for e in events[2, index]["n-comp"])
            for q in (3, 4):  # where the H100 caught both
                assert events[q, index]["compressor-last"] and events[q, index]["raw-ring-last"]
    near = {n: sum(e.near_tie for i in (0, 1) for e in _schedules(walk, f"control-{n}.bundle.tar.gz")[4, i]["n-comp"])
            for n in (96, 192)}
    assert near == {96: 5, 192: 17}  # design.py's SIXTH_LONG


def test_the_seeded_candidate_puts_a_q2_seed_on_the_ratio_128_boundary_in_the_shared_first_tokens(walk: ModuleType) -> None:
    from ds4ci.tinymodels import design
    from ds4ci.tinymodels.bundle import CHAT_TEMPLATE_TOKENS, tiny_structure
    from ds4ci.tinymodels.shapes import Shape

    w = walk
    st = tiny_structure(1, Shape(sliding_window=16))
    guess = {t: st.guess(t) for t in st.succ}
    answers, _ = w._members(str(CAPTURE / "control-96.bundle.tar.gz"))
    shared = 14
    assert answers[0][:shared] == answers[1][:shared] and answers[0][shared] != answers[1][shared]
    for made, expected in ((design.FIFTH_LOUD_ALIGNED, {2: False, 3: True, 4: True}),
                           (design.SIXTH_SEEDED, {2: True, 3: True, 4: True})):
        p = made.prompt_bytes[1] + CHAT_TEMPLATE_TOKENS
        for q, flushed in expected.items():
            run = w.schedule(answers[1][:shared], guess, q, answers[1])
            events = w.events_over(run, answers[1][:shared], p, st, 16, "compressor-last")
            assert bool(events["compressor-last"]) == flushed, (made, q)
    assert design.SIXTH.prompt_bytes == (117, 247) and design.SIXTH.max_tokens == 192
    assert design.SHIPPED is design.FIFTH_LOUD_ALIGNED  # the candidates are not shipped


def test_the_order_file_names_every_mutant_once() -> None:
    names = [x for x in ORDER.read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    catalogue = load_catalogue(default_catalogue())
    assert sorted(names) == sorted(m.name for m in catalogue.mutants) and len(set(names)) == len(names)


def test_the_capture_holds_every_row_the_docs_table_shows() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text[text.index("### The catalogue with the shipped models on an H100"):]
    section = section[:section.index("\n### ", 1)]
    assert "H100" in section and "sm_90" in section and "41ee7d0" in section
    for path in sorted((CAPTURE / "gates").glob("*.results.json")):
        name = path.name.removesuffix(".results.json")
        if name != "control-2":
            assert f"| `{name}` |" in section, name
