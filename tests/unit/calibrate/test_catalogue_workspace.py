"""ds4ci.calibrate's catalogue of planted engine faults and the workspace that applies one and puts it back."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
from paths import ROOT

from ds4ci.calibrate import catalogue as cat
from ds4ci.calibrate.workspace import Workspace, source_dir
from ds4ci.errors import UsageError


def test_the_shipped_catalogue_is_the_one_in_bench_mutants_and_names_its_engine_commits() -> None:
    assert cat.default_catalogue().resolve() == (ROOT / "bench" / "mutants" / cat.DEFAULT_NAME).resolve()
    found = cat.load_catalogue(cat.default_catalogue())
    assert found.repository == "Nuked88/lucebox" and all(re.fullmatch(r"[0-9a-f]{40}", c) for c in found.commits)
    assert found.sha256 == hashlib.sha256(cat.default_catalogue().read_bytes()).hexdigest()
    assert sum(1 for m in found.mutants if any(m.acts_at(q) for q in (2, 3, 4))) >= 10
    names = [m.name for m in found.mutants]
    assert len(names) == len(set(names)) >= 24
    for m in found.mutants:
        assert m.file.startswith("src/") and m.summary and all(s.old != s.new for s in m.substitutions)
        if m.equivalent:
            assert len(m.equivalent) > 60, m.name  # a reason read in the source, not a word


def test_the_wheel_ships_the_catalogue() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"bench/mutants" = "ds4ci/mutants"' in text


def test_a_mutant_acts_where_the_catalogue_does_not_say_it_cannot() -> None:
    sub = (cat.Substitution("a", "b"),)
    assert cat.Mutant("m", "s", "f", sub, "", ()).acts_at(2)
    assert not cat.Mutant("m", "s", "f", sub, "a reason", ()).acts_at(3)  # equivalent at every width
    partly = cat.Mutant("m", "s", "f", sub, "a reason", (2,))
    assert not partly.acts_at(2) and partly.acts_at(4)


def _catalogue(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('engine = "e"\nrepository = "o/r"\nwritten = "2026-12-03"\ncommits = ["' + "a" * 40 + '"]\n' + body)
    return path


@pytest.mark.parametrize(("body", "says"), [
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "y"}]\n' * 2, "duplicates a"),
    ('[[mutant]]\nname = "control"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "y"}]\n', "control"),
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "x"}]\n', "changes nothing"),
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = []\n', "non-empty list"),
    ('[[mutant]]\nname = "a"\nsummary = "s"\nfile = "src/x"\nsubstitutions = [{old = "x", new = "y"}]\n'
     "equivalent_at = [2]\n", "needs the reason"),
    ("", "found none"),
])
def test_a_malformed_catalogue_is_refused_with_what_was_found(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(cat.CatalogueError, match=says):
        cat.load_catalogue(_catalogue(tmp_path, body))


def test_only_names_mutants_of_the_catalogue(tmp_path: Path) -> None:
    found = cat.load_catalogue(_catalogue(tmp_path, '[[mutant]]\nname = "a"\nsummary = "s"\nfile = "x"\n'
                                                    'substitutions = [{old = "x", new = "y"}]\n'))
    assert [m.name for m in cat.choose(found, "")] == ["a"]
    with pytest.raises(cat.CatalogueError, match="no mutant named b"):
        cat.choose(found, "a,b")


def test_a_substitution_must_find_its_text_exactly_once() -> None:
    m = cat.Mutant("m", "s", "src/x", (cat.Substitution("if (a) {", "if (a && false) {"),), "", ())
    assert cat.mutate("x; if (a) { y; }", m) == "x; if (a && false) { y; }"
    for text, count in (("nothing here", 0), ("if (a) { } if (a) { }", 2)):
        with pytest.raises(cat.CatalogueError, match=f"found it {count} times"):
            cat.mutate(text, m)


def _repo(root: Path, original: bytes) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "x.cpp").write_bytes(original)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@e.invalid", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_the_workspace_puts_the_original_bytes_back_and_refuses_a_second_run_over_a_crash(tmp_path: Path) -> None:
    source, out = tmp_path / "src-root", tmp_path / "out"
    original = b"int f() {\r\n  if (a) { return 1; }\r\n}\n"
    _repo(source, original)
    m = cat.Mutant("m", "s", "src/x.cpp", (cat.Substitution("if (a) {", "if (a && false) {"),), "", ())
    Workspace(source, out).check_clean()
    ws = Workspace(source, out)
    ws.apply(m)
    assert b"a && false" in (source / "src" / "x.cpp").read_bytes()
    with pytest.raises(UsageError, match="--restore"):
        Workspace(source, out).check_clean()  # a run killed here leaves the record behind
    assert Workspace(source, out).restore() == "m"
    assert (source / "src" / "x.cpp").read_bytes() == original
    assert ws.restore() is None
    (source / "src" / "x.cpp").write_bytes(b"changed by hand\n")
    with pytest.raises(UsageError, match=r"did not make: src/x\.cpp"):
        Workspace(source, out).check_clean()


def test_a_kept_original_that_changed_is_never_written_back(tmp_path: Path) -> None:
    source, out = tmp_path / "s", tmp_path / "out"
    _repo(source, b"if (a) {}\n")
    m = cat.Mutant("m", "s", "src/x.cpp", (cat.Substitution("if (a) {", "if (0) {"),), "", ())
    Workspace(source, out).apply(m)
    (out / "originals" / "src" / "x.cpp").write_bytes(b"tampered\n")
    with pytest.raises(UsageError, match="does not match its recorded SHA-256"):
        Workspace(source, out).restore()
    assert (source / "src" / "x.cpp").read_bytes() == b"if (0) {}\n"


def test_the_source_folder_comes_from_the_build_folders_cache(tmp_path: Path) -> None:
    build = tmp_path / "b"
    build.mkdir()
    with pytest.raises(UsageError, match=r"CMakeCache\.txt"):
        source_dir(build, None)
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={tmp_path}\n")
    assert source_dir(build, None) == tmp_path.resolve()
    with pytest.raises(UsageError, match="not the source folder"):
        source_dir(build, tmp_path / "elsewhere")
