"""Bounds on a file a pull request's build wrote (the server binary) before ds4ci hashes or copies it.

A build can leave a file of any apparent size: a sparse file of 1 GiB costs it nothing on disk, but
hashing reads every byte and a plain copy writes them all. So before a byte is read, such a file must:

- be at most ``max_bytes`` long (:data:`SERVER_BIN`: 4 GiB, far above any server binary);
- hold at most :data:`MAX_HOLE_BYTES` of holes: when it has fewer blocks allocated than its size
  (``st_blocks`` against ``st_size``), its holes are measured with ``SEEK_DATA``/``SEEK_HOLE`` (a
  file system that compresses has fewer blocks but no holes), and a linker leaves none that large;

and reading it (hashing, copying) must end within ``deadline_s``. Each breach is a NoVerdictError
whose message names the limit and what was found.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ds4ci.errors import NoVerdictError

MAX_HOLE_BYTES = 16 << 20
_MAX_EXTENTS = 100_000  # a file cut into more data extents than this is treated as all holes past them


@dataclass(frozen=True)
class FileLimit:
    max_bytes: int
    deadline_s: float

    def check(self, role: str, path: Path, fd: int) -> None:
        """The open file ``fd`` against the size and hole limits (NoVerdictError naming what was found)."""
        st = os.fstat(fd)
        if st.st_size > self.max_bytes:
            raise NoVerdictError(
                f"{role} {path} is {st.st_size} bytes, more than ds4ci's limit of {self.max_bytes} bytes for it; "
                "refused before it is read"
            )
        holes = hole_bytes(fd, st.st_size) if st.st_blocks * 512 < st.st_size else 0
        if holes > MAX_HOLE_BYTES:
            raise NoVerdictError(
                f"{role} {path} is a sparse file: {holes} of its {st.st_size} bytes are holes (st_blocks "
                f"{st.st_blocks}), more than ds4ci's limit of {MAX_HOLE_BYTES}; a build writes its binary's bytes, "
                "so it is refused before it is hashed or copied"
            )

    def deadline(self) -> float:
        return time.monotonic() + self.deadline_s

    def checked(self, role: str, path: Path, fd: int) -> float:
        """``check``, then the deadline for reading it from now."""
        self.check(role, path, fd)
        return self.deadline()

    def past(self, deadline: float, role: str, path: Path, done: int) -> None:
        """NoVerdictError once ``deadline`` has passed (``done``: the bytes read so far)."""
        if time.monotonic() > deadline:
            raise NoVerdictError(
                f"{role} {path}: reading it took longer than ds4ci's deadline of {self.deadline_s:g} s "
                f"({done} bytes read); refused"
            )


SERVER_BIN = FileLimit(max_bytes=4 << 30, deadline_s=600.0)


def hole_bytes(fd: int, size: int) -> int:
    """How many of the file's ``size`` bytes lie in holes (SEEK_DATA/SEEK_HOLE; 0 where the system has neither)."""
    data_bytes, offset = 0, 0
    try:
        for _ in range(_MAX_EXTENTS):
            if offset >= size:
                break
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole from offset to the end
                    break
                raise
            offset = os.lseek(fd, start, os.SEEK_HOLE)
            data_bytes += offset - start
    except (AttributeError, OSError):  # no SEEK_DATA here: the size limit alone holds
        return 0
    finally:
        os.lseek(fd, 0, os.SEEK_SET)
    return size - data_bytes
