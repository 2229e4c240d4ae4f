"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import Iterator

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
