"""Reading the tables of ``ds4ci.toml`` that hold lists or nested items: ``[build]``, ``[[checks]]``,
``gate.prompts``; and the one rule for every table: only the keys the options table declares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options import table
from ds4ci.options import values as v


@dataclass(frozen=True)
class PinnedFile:
    role: str
    path: Path
    sha256: str | None


@dataclass(frozen=True)
class CheckSpec:
    """One extra check from ``[[checks]]``: a shell command and how to read its outcome."""

    name: str
    command: str
    parser: str
    report: Path | None = None  # JUnit XML file the command writes (parser "junit")
    timeout_s: float = table.DEFAULT_CHECK_TIMEOUT_S
    cwd: Path | None = None


@dataclass(frozen=True)
class BuildSpec:
    """``[build]``: how the server under test is built before the gate hashes and runs it."""

    command: str
    cwd: Path | None
    timeout_s: float
    server_bin: Path  # the binary the build produces: the one hashed, recorded and started


def unknown(keys: Sequence[str] | Mapping[str, Any], allowed: frozenset[str] | set[str], where: str) -> None:
    """Refuse keys outside ``allowed``: a near miss (a typo) is answered with "did you mean", else the keys are listed."""
    import difflib

    extra = sorted(set(keys) - allowed)
    if not extra:
        return
    guesses = {key: difflib.get_close_matches(key, sorted(allowed), n=1) for key in extra}
    if all(guesses.values()):
        meant = ", ".join(f"{guesses[key][0]} for {key}" if len(extra) > 1 else guesses[key][0] for key in extra)
        raise UsageError(f"{where}: unknown key(s) {', '.join(extra)}; did you mean {meant}?")
    raise UsageError(f"{where}: unknown key(s) {', '.join(extra)}; expected only {', '.join(sorted(allowed))}")


def section(doc: Mapping[str, Any], name: str, source: Path | str | None) -> dict[str, Any]:
    """The ``[name]`` table of a parsed file ({} when absent), holding only the keys the table declares."""
    found = doc.get(name, {})
    if not isinstance(found, dict):
        raise UsageError(f"{source}: [{name}] must be a table")
    unknown(found, table.keys(name), f"[{name}]")
    return found


def read_section(path: Path, name: str) -> dict[str, Any]:
    """One table of a ds4ci.toml, checked against the options table; other tables are not looked at."""
    return section(v.read_toml(path), name, path)


def _value(item: Mapping[str, Any], option: table.Option, where: str) -> Any:
    if option.key not in item:
        return option.default
    assert option.check is not None
    return option.check(item[option.key], f"{where}.{option.key}")


def _required(item: Mapping[str, Any], option: table.Option, where: str) -> Any:
    assert option.check is not None
    return option.check(item.get(option.key), f"{where}.{option.key}")


def _dir(item: Mapping[str, Any], key: str, where: str, base: Path | None) -> Path | None:
    return v.path(item[key], f"{where}.{key}", base) if key in item else base


def _check(item: Any, where: str, base: Path | None) -> CheckSpec:
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected a table")
    unknown(item, table.keys("checks"), where)
    opt = {o.key: o for o in table.in_section("checks")}
    name, command = (_required(item, opt[k], where) for k in ("name", "command"))
    parser = _value(item, opt["parser"], where)
    report = v.path(item["report"], f"{where}.report", base) if "report" in item else None
    if parser == "junit" and report is None:
        raise UsageError(f"{where}: parser \"junit\" needs report = \"path/to/junit.xml\"")
    return CheckSpec(name, command, parser, report, _value(item, opt["timeout"], where), _dir(item, "cwd", where, base))


def checks(found: Any, base: Path | None) -> tuple[CheckSpec, ...]:
    if found is None:
        return ()
    if not isinstance(found, list):
        raise UsageError("checks: expected [[checks]] tables")
    out: list[CheckSpec] = []
    for i, item in enumerate(found):
        spec = _check(item, f"checks[{i}]", base)
        if any(c.name == spec.name for c in out):
            raise UsageError(f"checks[{i}].name: check {spec.name!r} is declared twice")
        out.append(spec)
    return tuple(out)


def build(found: Any, base: Path | None) -> BuildSpec | None:
    if found is None:
        return None
    if not isinstance(found, dict):
        raise UsageError("build: expected a [build] table with command and server_bin")
    unknown(found, table.keys("build"), "[build]")
    if "server_bin" not in found:
        raise UsageError("build.server_bin: expected the path of the binary the build produces")
    opt = {o.key: o for o in table.in_section("build")}
    command, timeout = _required(found, opt["command"], "build"), _value(found, opt["timeout"], "build")
    server_bin = v.path(found["server_bin"], "build.server_bin", base).absolute()
    return BuildSpec(command, _dir(found, "cwd", "build", base), timeout, server_bin)


def _cli_prompts(files: Sequence[Path], shas: Sequence[str]) -> tuple[PinnedFile, ...]:
    if len(files) != len(shas):
        raise UsageError(
            f"--prompt-file and --prompt-sha256 are paired in order: found {len(files)} file(s) "
            f"and {len(shas)} SHA-256 value(s)"
        )
    return tuple(
        PinnedFile(f"prompt{i}", v.path(f, f"--prompt-file #{i + 1}"), v.parse_sha256(s, f"--prompt-sha256 #{i + 1}"))
        for i, (f, s) in enumerate(zip(files, shas, strict=True))
    )


def prompts(
    found: Any, cli_files: Sequence[Path] | None, cli_shas: Sequence[str] | None, base: Path | None
) -> tuple[PinnedFile, ...]:
    """The pinned prompts: from the command line when given there (paired in order), else ``gate.prompts``."""
    if cli_files or cli_shas:
        return _cli_prompts(list(cli_files or []), list(cli_shas or []))
    if found is None:
        return ()
    if not isinstance(found, list):
        raise UsageError("gate.prompts: expected an array of tables like {file = \"p.txt\", sha256 = \"...\"}")
    out = []
    for i, item in enumerate(found):
        where = f"gate.prompts[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected a table with keys file and sha256, found {item!r}")
        unknown(item, {"file", "sha256"}, where)
        path = v.path(item.get("file"), f"{where}.file", base)
        out.append(PinnedFile(f"prompt{i}", path, v.parse_sha256(item.get("sha256"), where)))
    return tuple(out)
