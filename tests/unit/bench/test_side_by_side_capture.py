"""docs/benchmarks.md's side-by-side table (section 13) is what the H100 capture of 2026-12-08 recorded."""

from __future__ import annotations

import json

from paths import ROOT

CAPTURE = ROOT / "tests" / "data" / "real-server" / "h100-2026-12-08-side-by-side"
STAGES = {"out-alone": "1", "out-sbs2-online": "2", "out-sbs4-best": "4"}


def _gates() -> list[tuple[str, str, dict[str, object]]]:
    found = []
    for stage, at_once in STAGES.items():
        for results in sorted((CAPTURE / stage / "gates").glob("*/*/results.json")):
            found.append((at_once, results.parent.name, json.loads(results.read_text())))
    return found


def test_every_captured_gate_is_a_row_of_the_table_with_its_recorded_times() -> None:
    section = (ROOT / "docs" / "benchmarks.md").read_text().split("### Measured on an H100 (2026-12-08)")[1]
    rows = {(cells[1], cells[3]): cells for cells in
            (tuple(c.strip() for c in line.split("|")) for line in section.splitlines() if line.startswith("| "))
            if len(cells) > 5}
    gates = _gates()
    assert len(gates) == 8, [g[1] for g in gates]
    for at_once, name, doc in gates:
        timings = doc["timings"]
        assert isinstance(timings, dict)
        servers = timings["servers"]
        generation = sum(s["run_s"] for s in servers)
        cells = rows[(at_once, name)]
        assert cells[4] == f"{timings['total_s']:.1f} s", (name, cells)
        assert cells[5] == f"{generation:.1f} s", (name, cells)
        assert cells[6] == f"{max(s['ready_s'] for s in servers):.2f} s", (name, cells)


def test_side_by_side_changed_no_verdict() -> None:
    """The same verdict for a gate whichever number ran beside it: the slowdown is time, never an answer."""
    verdicts: dict[str, set[str]] = {}
    for _, name, doc in _gates():
        verdicts.setdefault(name, set()).add(str(doc["verdict"]))
    assert verdicts["control"] == {"pass"} and all(v == {"fail"} for n, v in verdicts.items() if n != "control")
    built = [line for line in (CAPTURE / "builds.txt").read_text().splitlines()
             if line.startswith("[calibrate] built ") and "control" not in line]
    assert len(built) == 24  # of the catalogue's 27: the lease ended during the builds
