"""bench/real_mutants.py's catalogue of planted engine faults, its workspace, and the benchmark table that reports it."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import real_mutants as rm

CATALOGUE = rm.CATALOGUE_DIR / "lucebox-ds4-reference-exact.toml"


def test_the_catalogue_names_its_engine_commits_and_explains_every_equivalent_mutant() -> None:
    cat = rm.load_catalogue(CATALOGUE)
    assert cat.repository == "Nuked88/lucebox" and all(re.fullmatch(r"[0-9a-f]{40}", c) for c in cat.commits)
    names = [m.name for m in cat.mutants]
    assert len(names) == len(set(names)) >= 24
    assert sum(1 for m in cat.mutants if not m.equivalent) >= 10
    for m in cat.mutants:
        assert m.file.startswith("src/") and m.summary and all(s.old != s.new for s in m.substitutions)
        if m.equivalent:
            assert len(m.equivalent) > 60, m.name  # a reason read in the source, not a word


def test_the_benchmarks_table_lists_every_catalogued_mutant_with_the_engine_commit_and_the_date() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = text[text.index("## 10. Real-engine mutants"):]
    cat = rm.load_catalogue(CATALOGUE)
    assert "41ee7d0" in section and re.search(r"Run on \d{4}-\d{2}-\d{2}", section)
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", section, flags=re.MULTILINE)}
    assert {m.name for m in cat.mutants} <= rows, sorted({m.name for m in cat.mutants} - rows)


def _catalogue(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('engine = "e"\nrepository = "o/r"\nwritten = "2026-12-03"\ncommits = ["' + "a" * 40 + '"]\n' + body)
    return path


@pytest.mark.parametrize(("body", "says"), [
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "y"}]\n' * 2, "duplicates a"),
    ('[[mutant]]\nname = "control"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "y"}]\n', "control"),
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "x"}]\n', "changes nothing"),
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = []\n', "non-empty list"),
    ("", "found none"),
])
def test_a_malformed_catalogue_is_refused_with_what_was_found(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(rm.BenchError, match=says):
        rm.load_catalogue(_catalogue(tmp_path, body))


def test_a_substitution_must_find_its_text_exactly_once() -> None:
    m = rm.Mutant("m", "s", "src/x", (rm.Substitution("if (a) {", "if (a && false) {"),), "", ())
    assert rm.mutate("x; if (a) { y; }", m) == "x; if (a && false) { y; }"
    for text, count in (("nothing here", 0), ("if (a) { } if (a) { }", 2)):
        with pytest.raises(rm.BenchError, match=f"found it {count} times"):
            rm.mutate(text, m)


def test_the_workspace_puts_the_original_bytes_back_and_refuses_a_second_run_over_a_crash(tmp_path: Path) -> None:
    source, out = tmp_path / "src-root", tmp_path / "out"
    (source / "src").mkdir(parents=True)
    out.mkdir()
    original = b"int f() {\r\n  if (a) { return 1; }\r\n}\n"
    (source / "src" / "x.cpp").write_bytes(original)
    m = rm.Mutant("m", "s", "src/x.cpp", (rm.Substitution("if (a) {", "if (a && false) {"),), "", ())
    ws = rm.Workspace(source, out)
    ws.apply(m)
    assert b"a && false" in (source / "src" / "x.cpp").read_bytes()
    with pytest.raises(rm.BenchError, match="--restore"):
        rm.Workspace(source, out).check_clean()  # a run killed here leaves the record behind
    assert rm.Workspace(source, out).restore() == "m"
    assert hashlib.sha256((source / "src" / "x.cpp").read_bytes()).digest() == hashlib.sha256(original).digest()
    assert ws.restore() is None


def test_the_source_folder_comes_from_the_build_folders_cache(tmp_path: Path) -> None:
    build = tmp_path / "b"
    build.mkdir()
    with pytest.raises(rm.BenchError, match=r"CMakeCache\.txt"):
        rm.source_dir(build, None)
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={tmp_path}\n")
    assert rm.source_dir(build, None) == tmp_path.resolve()
    with pytest.raises(rm.BenchError, match="not the source folder"):
        rm.source_dir(build, tmp_path / "elsewhere")


def test_a_rollback_skipped_for_one_accept_length_is_equivalent_exactly_where_that_length_cannot_roll_back() -> None:
    # accept counts the seed, so at width q a rollback follows accept 1..q-1: skipping accept == k acts at q > k only
    cat = {m.name: m for m in rm.load_catalogue(CATALOGUE).mutants}
    for k in (1, 2, 3):
        m = cat[f"rollback-skipped-at-accept-{k}"]
        assert m.equivalent_at == tuple(q for q in (2, 3, 4) if q <= k) and (m.equivalent != "") == (k > 1), m.name
    assert all(set(m.equivalent_at) <= {2, 3, 4} for m in cat.values())
