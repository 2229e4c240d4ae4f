"""Small file helpers shared by several modules."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a synced temporary file and a rename: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def quit_on_broken_pipe(code: int) -> NoReturn:
    """Standard output's reader went away (``ds4ci-sim --list-faults | head``): exit quietly, no traceback.

    Standard output is pointed at /dev/null first, so the interpreter's own flush at exit cannot fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(code)
