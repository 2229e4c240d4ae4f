"""The tiny-model sets (seed 1) the reference server's double and faults are tested on."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")

from ds4ci.tinymodels.bundle import TinySet, write_tiny_set


@pytest.fixture(scope="module")
def successor(tmp_path_factory: pytest.TempPathFactory) -> TinySet:
    return write_tiny_set(tmp_path_factory.mktemp("succ"), seed=1)


@pytest.fixture(scope="module")
def random_set(tmp_path_factory: pytest.TempPathFactory) -> TinySet:
    return write_tiny_set(tmp_path_factory.mktemp("rand"), seed=1, kind="random")
