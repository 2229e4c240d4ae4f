"""Sealing a file the server wrote in its sandbox scratch folder (the exact-differential trace) as evidence.

Called once nothing of the sandbox runs any more, just before its scratch folder is removed. The file
is PR data: opened without following a link and without blocking on a FIFO, taken only when it is a
regular file of at most ``limit`` bytes, and copied into the server's evidence folder; anything else is
refused, and what happened is one line recorded in the server's lifecycle (judging reads it).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

COLLECTED = "collected"


def collect(source: Path, destination: Path, limit: int) -> str:
    """``collected``, ``absent (...)`` or ``refused: ...``: copy ``source`` to ``destination`` when it is safe."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent (the server wrote no trace file)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "refused: a symbolic link, not the server's own file"
        return f"refused: it cannot be opened ({exc.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "refused: not a regular file (a FIFO, device or folder)"
        if info.st_size > limit:
            return f"refused: {info.st_size} bytes, over the {limit}-byte limit for it"
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        return f"refused: over the {limit}-byte limit for it (it grew while read)"
    try:
        with destination.open("xb") as out:  # never overwrites evidence
            out.write(data)
    except FileExistsError:
        return f"refused: {destination.name} already exists in the evidence (never overwritten)"
    return COLLECTED
