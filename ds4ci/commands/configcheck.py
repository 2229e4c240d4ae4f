"""``ds4ci config check``: a ds4ci.toml validated offline, for every runner it names, without the model files.

Types, unknown keys, runner tables, widths and the form of every pin are checked by the same loader
the gate uses; the runner list by the one ``config runners`` gives the workflows (a file that names no
runner is refused) and a ``[merge]`` table by the one ``merge-check`` reads (``merge.runners = []`` is
refused); only the files' existence is not checked (``ds4ci preflight`` checks that on the runner).
A ``${VAR}`` that is not set here is given a stand-in so the rest can be checked, and named.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ds4ci.commands import workflowpin
from ds4ci.errors import EXIT_PASS, EXIT_USAGE, UsageError
from ds4ci.github import mergeconfig
from ds4ci.options import config, configpath, runners
from ds4ci.options.problems import key_problems, said
from ds4ci.options.values import PIN_PLACEHOLDER_START, read_toml

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@contextlib.contextmanager
def _stand_ins(text: str) -> Iterator[list[str]]:
    """Set every ``${VAR}`` the file uses but this environment lacks to a stand-in path, for the check only."""
    missing = sorted({name for name in _VAR.findall(text) if not os.environ.get(name)})
    for name in missing:
        os.environ[name] = f"/unset-{name}"
    try:
        yield missing
    finally:
        for name in missing:
            os.environ.pop(name, None)


def _runner_names(doc: dict[str, object], runner: str | None) -> list[str | None]:
    if runner is not None:
        return [runner]
    tables = doc.get("runners")
    return list(tables) if isinstance(tables, dict) and tables else [None]


def _stand_in_pins(value: Any, where: str, found: list[str]) -> Any:
    """The document with every pin placeholder (``TODO: ...``, what ``ds4ci init`` writes for a file it could not
    read) replaced by a well-formed stand-in, so the rest is still checked; each one's place goes into ``found``."""
    if isinstance(value, dict):
        return {k: _stand_in_pins(v, f"{where}.{k}" if where else str(k), found) for k, v in value.items()}
    if isinstance(value, list):
        return [_stand_in_pins(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    if isinstance(value, str) and where.endswith("sha256") and value.startswith(PIN_PLACEHOLDER_START):
        found.append(where)
        return "0" * 64
    return value


def _todo_problem(todos: list[str]) -> str:
    return (f"{', '.join(todos)}: not pinned yet ({len(todos)} pin(s) still hold the placeholder `ds4ci init` writes "
            "for a file it could not read); put each file's SHA-256 there (`sha256sum FILE` on the runner that has "
            "it, or `ds4ci pin` there: it rewrites the pins only)")


def _shared_problems(path: Path, doc: dict[str, Any], known: list[str]) -> list[str]:
    """What the other readers of the file refuse, through their own code: ``config runners`` (the workflows'
    runner matrix) and, where the file has a ``[merge]`` table, ``merge-check``'s reading of it; a problem
    ``known`` already says is not said again."""
    readers: list[tuple[str, Callable[[], object]]] = [("config runners", lambda: runners.from_doc(doc, path))]
    if "merge" in doc:
        readers.append(("merge-check", lambda: mergeconfig.requirements(path, None, None, None)))
    found: list[str] = []
    for who, read in readers:
        try:
            read()
        except UsageError as exc:
            if not said(str(exc), known):
                found.append(f"{who} refuses it: {exc}")
    return found


def run_config_check(config_file: Path | None, runner: str | None) -> int:
    path = configpath.required(config_file)
    todos: list[str] = []
    doc = _stand_in_pins(read_toml(path), "", todos)
    problems: list[str] = [_todo_problem(todos)] if todos else []
    alone = key_problems(doc, str(path))  # every key on its own first: all of them at once
    problems += alone
    by_problem: dict[str, list[str]] = {}  # one line per problem, naming every runner it concerns
    checked: list[str] = []
    with _stand_ins(path.read_text(encoding="utf-8", errors="replace")) as missing:
        for name in _runner_names(doc, runner):
            try:
                cfg = config.load(path, {"runner": name}, check_files=False, doc=doc)
            except UsageError as exc:
                if not said(str(exc), alone):
                    by_problem.setdefault(str(exc), []).append(name or "(host name)")
                continue
            what = "extra checks only" if cfg.role != "gate" else (
                f"widths {','.join(map(str, cfg.widths))}, {len(cfg.prompts)} prompt(s), target_device {cfg.target_device}"
                + (f", arms on {','.join(cfg.arm_devices())}" if cfg.devices else "")
                + (f", {cfg.parallel} arms per device" if cfg.parallel > 1 else "")
            )
            checked.append(f"  {cfg.runner}: {cfg.role}: {what}" + (f", gpu {' or '.join(cfg.gpu)}" if cfg.gpu else ""))
    problems += [f"runner{'s' if len(names) > 1 else ''} {', '.join(names)}: {problem}"
                 for problem, names in by_problem.items()]
    problems += _shared_problems(path, doc, problems)
    for warning in workflowpin.warnings(path):  # said whether the file is valid or not
        print(f"warning: {warning}", file=sys.stderr)
    if problems:
        print(f"{path}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{path}: valid (form only: the files are checked on the runner by `ds4ci preflight --config {path}`)")
    print("\n".join(checked))
    if missing:
        them = "it" if len(missing) == 1 else "them"
        print(f"note: {', '.join('${' + m + '}' for m in missing)} not set here; the paths that use {them} were checked "
              "for form only")
    return EXIT_PASS


def run_config_runners(config_file: Path | None, json_out: bool) -> int:
    path = configpath.required(config_file)
    found = runners.from_file(path)
    if json_out:
        print(runners.to_json(found))
        return EXIT_PASS
    width = max(len(r.name) for r in found)
    for r in found:
        print(f"{r.name:<{width}}  {r.role:<16}  runs-on: {', '.join(r.labels)}")
    return EXIT_PASS
