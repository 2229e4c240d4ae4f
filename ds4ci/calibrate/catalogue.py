"""The catalogue of planted faults: short, exact source substitutions in an engine checkout (``mutants/*.toml``).

One location: ``bench/mutants/`` in the repository, shipped in the wheel as ``ds4ci/mutants`` (pyproject's
force-include), read through :func:`default_catalogue`. Each mutant names a file (relative to the engine's
source folder) and substitutions whose ``old`` text must occur exactly once; ``equivalent`` says why a mutant
cannot change any answer, ``equivalent_at`` at which widths (all widths when ``equivalent`` is given alone).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

CONTROL = "control"  # the unchanged build; never a mutant's name
DEFAULT_NAME = "lucebox-ds4-reference-exact.toml"


class CatalogueError(UsageError):
    """A refusal about the catalogue or the source it applies to: the message says what was expected and found."""


@dataclass(frozen=True)
class Substitution:
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    summary: str
    file: str
    substitutions: tuple[Substitution, ...]
    equivalent: str  # why it cannot change an answer ("" where it can)
    equivalent_at: tuple[int, ...]  # widths where it cannot (all widths when equivalent and this is empty)

    def acts_at(self, q: int) -> bool:
        """Whether the mutant can change an answer at width ``q`` (the catalogue's reading of the source)."""
        if not self.equivalent:
            return True
        return bool(self.equivalent_at) and q not in self.equivalent_at


@dataclass(frozen=True)
class Catalogue:
    path: Path
    engine: str
    repository: str
    commits: tuple[str, ...]
    written: str
    mutants: tuple[Mutant, ...]
    sha256: str  # of the file's bytes: the catalogue's digest in a calibration record


def default_folder() -> Path:
    """The shipped catalogues: ds4ci/mutants in the wheel, else the repository's bench/mutants."""
    packaged = Path(str(resources.files("ds4ci").joinpath("mutants")))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "bench" / "mutants"


def default_catalogue() -> Path:
    return default_folder() / DEFAULT_NAME


def _text(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise CatalogueError(f"{where}: expected a non-empty string `{key}`, found {value!r}")
    return value


def _mutant(raw: Any, where: str) -> Mutant:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: expected a [[mutant]] table, found {raw!r}")
    name = _text(raw, "name", where)
    subs = raw.get("substitutions")
    if not isinstance(subs, list) or not subs or not all(isinstance(s, dict) for s in subs):
        raise CatalogueError(f"{where} ({name}): expected a non-empty list `substitutions`")
    parsed = tuple(Substitution(_text(s, "old", where), str(s.get("new", ""))) for s in subs)
    if any(s.old == s.new for s in parsed):
        raise CatalogueError(f"{where} ({name}): a substitution whose new text equals its old text changes nothing")
    at = raw.get("equivalent_at", [])
    if not isinstance(at, list) or not all(isinstance(q, int) and not isinstance(q, bool) for q in at):
        raise CatalogueError(f"{where} ({name}): `equivalent_at` must list widths, found {at!r}")
    equivalent = str(raw.get("equivalent", ""))
    if at and not equivalent:
        raise CatalogueError(f"{where} ({name}): `equivalent_at` needs the reason in `equivalent`")
    return Mutant(name, _text(raw, "summary", where), _text(raw, "file", where), parsed, equivalent, tuple(at))


def parse_catalogue(data: bytes, path: Path) -> Catalogue:
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogueError(f"{path}: not a readable TOML catalogue ({exc})") from None
    commits = doc.get("commits")
    if not isinstance(commits, list) or not commits or not all(isinstance(c, str) and len(c) == 40 for c in commits):
        raise CatalogueError(f"{path}: expected `commits`, a list of full 40-hex engine commits, found {commits!r}")
    raw = doc.get("mutant") or []
    mutants = [_mutant(m, f"{path} mutant {i + 1}") for i, m in enumerate(raw if isinstance(raw, list) else [raw])]
    names = [m.name for m in mutants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes or not mutants:
        found = f"duplicates {', '.join(dupes)}" if dupes else "none"
        raise CatalogueError(f"{path}: expected mutants with unique names, found {found}")
    if CONTROL in names:
        raise CatalogueError(f"{path}: `{CONTROL}` names the unchanged build and cannot name a mutant")
    return Catalogue(path, _text(doc, "engine", str(path)), _text(doc, "repository", str(path)), tuple(commits),
                     _text(doc, "written", str(path)), tuple(mutants), hashlib.sha256(data).hexdigest())


def load_catalogue(path: Path) -> Catalogue:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CatalogueError(f"{path}: expected a readable TOML catalogue ({exc.strerror or exc})") from None
    return parse_catalogue(data, path)


def mutate(text: str, mutant: Mutant) -> str:
    """The file's text with every substitution applied; each ``old`` must occur exactly once."""
    for sub in mutant.substitutions:
        count = text.count(sub.old)
        if count != 1:
            raise CatalogueError(f"mutant {mutant.name}: expected {sub.old!r} exactly once in {mutant.file}, found it "
                                 f"{count} times (the catalogue was written for another engine commit?)")
        text = text.replace(sub.old, sub.new)
    return text


def choose(catalogue: Catalogue, only: str) -> list[Mutant]:
    """The mutants ``only`` names (comma-separated; empty: all), in the catalogue's order."""
    wanted = [n for n in only.split(",") if n]
    unknown = sorted(set(wanted) - {m.name for m in catalogue.mutants})
    if unknown:
        raise CatalogueError(f"--only: no mutant named {', '.join(unknown)} in {catalogue.path}")
    return [m for m in catalogue.mutants if not wanted or m.name in wanted]


def check_applies(source: Path, mutants: list[Mutant]) -> None:
    """Every substitution found exactly once in the source, before any file is touched."""
    for m in mutants:
        path = source / m.file
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CatalogueError(f"mutant {m.name}: expected a readable UTF-8 file {path} ({exc})") from None
        mutate(text, m)
