"""The package tree is the architecture: one stage per folder, imports pointing one way, no cycles.

Stages, lowest first. A module may import its own stage and any stage listed before it, never one
after it: the gate writes through the evidence store, ``verify`` re-judges through ``judging``
without knowing the gate exists, and nothing below ``commands`` knows about the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ds4ci

PACKAGE = Path(ds4ci.__file__).resolve().parent

STAGES = [
    {"ds4ci", "ds4ci.errors", "ds4ci.fileio", "ds4ci.log", "ds4ci.records", "ds4ci.textsafe"},
    {"ds4ci.options"},
    {"ds4ci.supervisor"},
    {"ds4ci.runner"},
    {"ds4ci.judging"},
    {"ds4ci.evidence"},
    {"ds4ci.calibrate"},
    {"ds4ci.gate"},
    {"ds4ci.report"},
    {"ds4ci.github"},
    {"ds4ci.service"},
    {"ds4ci.bisect"},
    {"ds4ci.rehearse"},
    {"ds4ci.simulator", "ds4ci.refserver", "ds4ci.tinymodels"},
    {"ds4ci.commands", "ds4ci.cli", "ds4ci.__main__"},
]


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names[name] = path
    return names


MODULES = module_names()


def imports_of(name: str, path: Path) -> set[str]:
    """Every ds4ci module ``name`` imports, at top level or inside a function (lazy imports count)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "ds4ci")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "ds4ci":
                continue
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in MODULES else module)
    found.discard(name)
    return found


def stage_of(name: str) -> int:
    for index, stage in enumerate(STAGES):
        if name in stage or any(name.startswith(prefix + ".") for prefix in stage if prefix != "ds4ci"):
            return index
    raise AssertionError(f"{name} belongs to no stage: add its folder to STAGES (and to the README's layout)")


def test_every_module_belongs_to_a_stage() -> None:
    for name in MODULES:
        stage_of(name)


def test_imports_point_only_to_earlier_stages() -> None:
    upward = []
    for name, path in sorted(MODULES.items()):
        for target in sorted(imports_of(name, path)):
            if stage_of(target) > stage_of(name):
                upward.append(f"{name} imports {target}")
    assert not upward, "imports against the flow:\n" + "\n".join(upward)


def test_no_import_cycles_between_modules() -> None:
    graph = {name: imports_of(name, path) & MODULES.keys() for name, path in MODULES.items()}
    # A package's __init__ re-exporting its children is not a cycle worth failing on; none do today.
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target):], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_an_upward_and_a_lazy_import(tmp_path: Path) -> None:
    # The rules above must be able to fail: a judging module importing the CLI, even inside a function.
    module = tmp_path / "rules.py"
    module.write_text("def f():\n    from ds4ci.commands import verify\n    from . import protocol\n", encoding="utf-8")
    found = imports_of("ds4ci.judging.rules", module)
    assert found == {"ds4ci.commands.verify", "ds4ci.judging.protocol"}
    assert stage_of("ds4ci.commands.verify") > stage_of("ds4ci.judging.rules")


MAX_FUNCTION_LINES = 60  # a function longer than this wants splitting
MAX_MODULE_LINES = 420  # a module longer than this has more than one job


def test_functions_and_modules_stay_small() -> None:
    too_long = []
    for name, path in sorted(MODULES.items()):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines (limit {MAX_FUNCTION_LINES})")
    assert not too_long, "split these:\n" + "\n".join(too_long)
