"""Every problem of a parsed ``ds4ci.toml`` that one key shows alone, all at once (``ds4ci config check``).

The loader (``options.config.load``) stops at its first problem, as a command must; ``config check``
first asks this module about each key on its own (unknown keys, each value through its option's
checker), so a file with five mistakes is answered with five lines, then the loader for the rules that
tie keys together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options import sections, table

_SINGLE = ("gate", "runner", "sandbox", "build", "merge", "publish", "preflight")  # tables of plain keys


def _runner_options(key: str) -> list[table.Option]:
    return [o for o in table.OPTIONS if o.runner_table and o.key == key and o.section in ("gate", "runner", "sandbox")]


def _check(option: table.Option, value: Any, where: str, found: list[str]) -> None:
    try:
        if isinstance(value, str) and option.toml_type.startswith("array"):
            from ds4ci.options.config import file_type

            file_type(option, value, where)
        if option.check is not None:
            option.check(value, where)
    except UsageError as exc:
        found.append(str(exc))


def _unknown(keys: Mapping[str, Any], allowed: frozenset[str], where: str, found: list[str]) -> None:
    try:
        sections.unknown(keys, allowed, where)
    except UsageError as exc:
        found.append(str(exc))


def key_problems(doc: Mapping[str, Any], source: str) -> list[str]:
    """One line per problem a key shows on its own; [] when every key and value has the expected form. ``source``
    names the file (its top-level keys' problems say it)."""
    found: list[str] = []
    _unknown(doc, frozenset(table.TOP_KEYS), source, found)
    for name in _SINGLE:
        part = doc.get(name)
        if part is None:
            continue
        if not isinstance(part, dict):
            found.append(f"[{name}]: expected a table, found {type(part).__name__}")
            continue
        _unknown(part, table.keys(name), f"[{name}]", found)
        for key, value in part.items():
            if key in table.keys(name):
                _check(table.get(name, key), value, f"{name}.{key}", found)
    runners = doc.get("runners", {})
    if isinstance(runners, dict):
        for runner, part in runners.items():
            if not isinstance(part, dict):
                continue  # the loader says it, once
            _unknown(part, table.keys("runners"), f"[runners.{runner}]", found)
            for key, value in part.items():
                for option in _runner_options(key)[:1]:
                    _check(option, value, f"runners.{runner}.{key}", found)
    return list(dict.fromkeys(found))


def said(problem: str, found: list[str]) -> bool:
    """Is ``problem`` (the loader's, which names a key as gate.KEY) one of ``found`` under another place's name?"""
    tail = problem.split(": ", 1)[-1]
    return any(f.split(": ", 1)[-1] == tail for f in found)
