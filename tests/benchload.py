"""A script of bench/ loaded as a module, for the tests that run what a benchmark runs."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from paths import ROOT


def bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
