"""The runner table of a ``ds4ci.toml``: each runner's name, the labels that reach it, its role.

This is what the gate workflow's matrix is made of (``ds4ci config runners --json`` prints it and
``ds4ci dispatch-check`` selects from it), so a runner added to the file needs no workflow edit.
Only the ``[runner]`` and ``[runners.<name>]`` tables are read: the plan job that builds the matrix
has no model files and none of the runners' variables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ds4ci.errors import UsageError
from ds4ci.options import sections, table
from ds4ci.options import values as v


@dataclass(frozen=True)
class RunnerSpec:
    """One runner of the matrix: its name (status context ds4ci/<name>), labels, queue and role."""

    name: str
    labels: tuple[str, ...]
    queue: str  # one gate job at a time per value, across all pull requests (from a file: the runner's name)
    role: str = "gate"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "labels": list(self.labels), "queue": self.queue, "role": self.role}


def default_labels(name: str) -> tuple[str, ...]:
    return ("self-hosted", name)


def _value(merged: dict[str, Any], key: str, where: str) -> Any:
    option = table.get("runner", key)
    if key not in merged:
        return option.default
    assert option.check is not None
    return option.check(merged[key], f"{where}.{key}")


def from_doc(doc: dict[str, Any], source: Path | str) -> tuple[RunnerSpec, ...]:
    """Every runner the file names, in file order: its ``[runners.<name>]`` tables, else ``[runner] name``."""
    sections.unknown(doc, set(table.TOP_KEYS), str(source))
    shared = sections.section(doc, "runner", source)
    per_runner = doc.get("runners", {})
    if not isinstance(per_runner, dict) or not all(isinstance(t, dict) for t in per_runner.values()):
        raise UsageError(f"{source}: [runners.<name>] entries must be tables")
    if not per_runner:
        if "name" not in shared:
            raise UsageError(f"{source}: names no runner; expected a [runners.<name>] table for each runner "
                             "(`ds4ci init --runner NAME` writes one) or [runner] name")
        per_runner = {v.runner_name(shared["name"], "runner.name"): {}}
    out: list[RunnerSpec] = []
    for name, own in per_runner.items():
        where = f"[runners.{name}]"
        v.runner_name(name, where)
        sections.unknown(own, table.keys("runners"), where)
        merged = {**shared, **{k: val for k, val in own.items() if k in table.keys("runner")}}
        labels = _value(merged, "labels", where) if "labels" in merged else default_labels(name)
        out.append(RunnerSpec(name, labels, name, _value(merged, "role", where)))
    return tuple(out)


def from_file(path: Path) -> tuple[RunnerSpec, ...]:
    return from_doc(v.read_toml(path), path)


def to_json(runners: tuple[RunnerSpec, ...]) -> str:
    """One line: what ``--runner-table`` takes and ``fromJSON`` reads."""
    return json.dumps([r.as_json() for r in runners], separators=(",", ":"))


def parse_json(text: str, where: str = "runner-table") -> tuple[RunnerSpec, ...]:
    """Read a JSON runner table: ``[{"name": ..., "labels": [...], "queue": ..., "role": ...}, ...]`` (role optional)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(doc, list) or not doc:
        raise UsageError(f"{where}: expected a non-empty JSON array of runner objects")
    out: list[RunnerSpec] = []
    for i, item in enumerate(doc):
        at = f"{where}[{i}]"
        if not isinstance(item, dict) or not {"name", "labels", "queue"} <= set(item) <= {"name", "labels", "queue", "role"}:
            raise UsageError(f"{at}: expected an object with name, labels, queue and optionally role, found {item!r}")
        queue = item["queue"]
        if not isinstance(queue, str) or not v.RUNNER_LABEL.match(queue):
            raise UsageError(f"{at}.queue: expected a queue name (one gate job at a time per value), found {queue!r}")
        out.append(RunnerSpec(v.runner_name(item["name"], f"{at}.name"), v.runner_labels(item["labels"], f"{at}.labels"),
                              queue, v.one_of(v.RUNNER_ROLES)(item.get("role", "gate"), f"{at}.role")))
    names = [r.name for r in out]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: runner names must be unique, found {names}")
    return tuple(out)
