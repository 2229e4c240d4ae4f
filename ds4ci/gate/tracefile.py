"""Sealing a file the server wrote in its sandbox scratch folder (the exact-differential trace) as evidence.

Called once nothing of the sandbox runs any more, just before its scratch folder is removed. The file
is PR data: opened through the confined reader (no link followed, no blocking on a FIFO), taken only
when it is a regular file of at most ``limit`` bytes, and copied into the server's evidence folder; anything else is
refused, and what happened is one line recorded in the server's lifecycle (judging reads it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ds4ci.judging import confined
from ds4ci.judging.exacttrace import COLLECTED, REFUSED


def collect(source: Path, destination: Path, limit: int) -> str:
    """``collected``, ``absent (...)`` or ``refused: ...``: copy ``source`` to ``destination`` when it is safe."""
    try:
        with confined.open_regular(source.parent, source.name) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                return f"{REFUSED}: {size} bytes, over the {limit}-byte limit for it"
            data = fh.read(limit + 1)
    except confined.NotRegularError:
        return f"{REFUSED}: not a regular file (a FIFO, device or folder)"
    except confined.ConfinedError as exc:
        if exc.cause is not None and exc.cause.errno == errno.ENOENT:
            return "absent (the server wrote no trace file)"
        if exc.cause is not None and exc.cause.errno == errno.ELOOP:
            return f"{REFUSED}: a symbolic link, not the server's own file"
        return f"{REFUSED}: it cannot be opened ({exc.cause.strerror if exc.cause is not None else exc})"
    if len(data) > limit:
        return f"{REFUSED}: over the {limit}-byte limit for it (it grew while read)"
    try:
        with destination.open("xb") as out:  # never overwrites evidence
            out.write(data)
    except FileExistsError:
        return f"{REFUSED}: {destination.name} already exists in the evidence (never overwritten)"
    return COLLECTED
