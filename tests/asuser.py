"""What the tests that run a command as root and again as ``nobody`` share: which users, when nobody can be
used, and a scratch folder the user can be given (pytest's own folders are root's alone)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

USERS = ["root", "nobody"]


def require(user: str) -> str:
    """``user``, or a skip with the reason where nobody cannot be switched to here."""
    if user == "nobody" and (os.geteuid() != 0 or not Path("/usr/bin/python3").is_file()):
        pytest.skip("needs root (to switch to nobody) and a system python3")
    return user


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A new folder outside pytest's, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
