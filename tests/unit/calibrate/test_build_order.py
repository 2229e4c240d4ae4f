"""The order the calibration builds its mutants in."""

from __future__ import annotations

from ds4ci.calibrate.catalogue import Mutant
from ds4ci.calibrate.loop import build_order


def test_mutants_build_grouped_by_file_in_their_order_within_a_file() -> None:
    def m(name: str, file: str) -> Mutant:
        return Mutant(name, "", file, (), "", ())

    order = build_order([m("a", "spec"), m("b", "graph"), m("c", "spec"), m("d", "graph"), m("e", "other"), m("f", "spec")])
    assert [x.name for x in order] == ["a", "c", "f", "b", "d", "e"]
