"""A check's or the build's log, cut at log_cap_mib like a server's, with the cut recorded in the log."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ds4ci.judging.steps import CUT_MARKER

_PUMP_CHUNK = 1 << 16
_PUMP_JOIN_S = 10.0


class CappedLog:
    """A check's log written through a pipe, cut at ``cap`` bytes (log_cap_mib) and marked where cut.

    Only the log is capped (the command's other files are not): the pump keeps draining the pipe
    so the command never blocks, discards what is over the cap, and ends the log with one line
    that says so. The sealed log thus records the cut itself.
    """

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.cap = path, cap
        self.discarded = 0
        self._out = path.open("wb")  # here, so a log that cannot be created fails before the command starts
        self._read, self.write_fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name=f"ds4ci-log-{path.name}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        written = 0
        with self._out as out:
            while chunk := os.read(self._read, _PUMP_CHUNK):
                keep = chunk[: max(0, self.cap - written)]
                out.write(keep)
                written += len(keep)
                self.discarded += len(chunk) - len(keep)
            if self.discarded:
                out.write(b"\n" + CUT_MARKER + f" the output reached the log cap of {self.cap} bytes (log_cap_mib); "
                          f"{self.discarded} more bytes were discarded\n".encode())
        os.close(self._read)

    def close(self) -> None:
        """Once the command has ended: close our end, let the pump finish the log."""
        os.close(self.write_fd)
        self._thread.join(_PUMP_JOIN_S)  # a survivor that keeps the pipe open leaves the pump to a daemon thread
