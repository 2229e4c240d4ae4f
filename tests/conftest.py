"""Fixtures shared by several test modules, and the ``e2e`` mark for everything under tests/e2e/.

``tests/unit/`` mirrors the package (``tests/unit/judging/`` tests ``ds4ci/judging/``) and runs in
process; ``tests/e2e/`` starts real processes. ``pytest -m "not e2e"`` runs the unit tests alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import FakeGitHub


@pytest.fixture()
def fake() -> Iterator[FakeGitHub]:
    """A fresh stateful fake GitHub API for acme/engine on loopback (test_publish has its own)."""
    server = FakeGitHub(owner="acme", repo="engine").start()
    try:
        yield server
    finally:
        server.stop()


E2E_DIR = Path(__file__).resolve().parent / "e2e"



def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
