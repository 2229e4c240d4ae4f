"""bench/real_mutants.py: a thin caller of ds4ci.calibrate (its catalogue and workspace are tested in
tests/unit/calibrate/), and the benchmark table that reports the catalogue's mutants."""

from __future__ import annotations

import ast
import re
import sys

from paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import real_mutants as rm

CATALOGUE = rm.CATALOGUE_DIR / "lucebox-ds4-reference-exact.toml"


def test_the_bench_reads_the_one_catalogue_and_has_no_copy_of_the_library() -> None:
    from ds4ci.calibrate import catalogue, workspace

    assert rm.load_catalogue is catalogue.load_catalogue and rm.Workspace is workspace.Workspace
    assert CATALOGUE.resolve() == catalogue.default_catalogue().resolve()
    tree = ast.parse((ROOT / "bench" / "real_mutants.py").read_text(encoding="utf-8"))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert not defined & {"mutate", "load_catalogue", "source_dir", "Workspace", "build", "built_binary", "gate"}


def test_the_benchmarks_table_lists_every_catalogued_mutant_with_the_engine_commit_and_the_date() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text[text.index("## 10. Real-engine mutants"):]
    cat = rm.load_catalogue(CATALOGUE)
    assert "41ee7d0" in section and re.search(r"Run on \d{4}-\d{2}-\d{2}", section)
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", section, flags=re.MULTILINE)}
    assert {m.name for m in cat.mutants} <= rows, sorted({m.name for m in cat.mutants} - rows)
